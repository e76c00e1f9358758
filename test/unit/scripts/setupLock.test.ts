import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';

const repo = path.resolve(__dirname, '../../../..');

function stub(dir: string, name: string, body: string): void {
  const file = path.join(dir, name);
  writeFileSync(file, `#!/bin/sh\n${body}\n`);
  chmodSync(file, 0o755);
}

// The set-up starts dockerd while it holds its lock; the engine must not keep that lock, or every
// later set-up in the checkout (`npm start` after `npm test`) waits for as long as the engine runs.
test('a set-up that starts the engine leaves its lock free for the next set-up', () => {
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'tether-setup-lock-'));
  const bin = path.join(tmp, 'bin');
  const checkout = path.join(tmp, 'checkout');
  mkdirSync(bin);
  mkdirSync(path.join(checkout, 'scripts'), { recursive: true });
  copyFileSync(path.join(repo, 'scripts/setup.sh'), path.join(checkout, 'scripts/setup.sh'));
  // A stand-in engine: `docker info` answers once the stand-in dockerd has started, which then
  // stays alive (with every descriptor it inherited) like the real one; it reports live-restore
  // on when the set-up wrote it into the stand-in's daemon.json.
  const daemonJson = path.join(tmp, 'daemon.json');
  stub(
    bin,
    'docker',
    [
      `[ -f "${tmp}/up" ] || exit 1`,
      '[ "$1" = version ] && { echo 0-standin; exit 0; }',
      `case "$*" in *LiveRestoreEnabled*) grep -q '"live-restore": true' "${daemonJson}" && echo true || echo false ;; esac`,
      'exit 0',
    ].join('\n'),
  );
  stub(bin, 'dockerd', `echo $$ > "${tmp}/dockerd.pid"\ntouch "${tmp}/up"\nexec sleep 60`);
  stub(bin, 'sudo', 'exec "$@"');
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PATH: `${bin}:${process.env.PATH}`,
    TETHER_DOCKERD_LOG: path.join(tmp, 'dockerd.log'),
    TETHER_DOCKERD_CONFIG: daemonJson,
  };
  delete env.TETHER_WITH_RUNSC;
  try {
    execFileSync('bash', [path.join(checkout, 'scripts/setup.sh'), '--engine-only'], {
      env,
      stdio: 'pipe',
      timeout: 30_000,
    });
    assert.ok(existsSync(path.join(tmp, 'dockerd.pid')), 'the stand-in engine was started');
    const probe = spawnSync('flock', ['-n', path.join(checkout, '.tether/setup.lock'), 'true'], { timeout: 10_000 });
    assert.equal(probe.status, 0, 'the set-up lock is still held after the set-up ended');
  } finally {
    const pidFile = path.join(tmp, 'dockerd.pid');
    if (existsSync(pidFile)) {
      try {
        process.kill(Number(readFileSync(pidFile, 'utf8')), 'SIGKILL');
      } catch {
        // already gone
      }
    }
    rmSync(tmp, { recursive: true, force: true });
  }
});
