import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  writeFileSync,
} from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

const repo = path.resolve(__dirname, '../../../..');
const ID = 'c0ffee';

/**
 * The wrapper beside a stand-in runsc that records its arguments and, for `checkpoint`, writes
 * an image into the path it was given, as runsc does.
 */
function setUp() {
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'tether-runsc-wrapper-'));
  const bin = path.join(tmp, 'bin');
  mkdirSync(bin);
  copyFileSync(path.join(repo, 'deploy/runsc/runsc-tether'), path.join(bin, 'runsc-tether'));
  const calls = path.join(tmp, 'calls');
  writeFileSync(
    path.join(bin, 'runsc'),
    `#!/bin/bash
printf '%s\\n' "$*" >>${calls}
[ -z "\${FAIL:-}" ] || exit 1
prev=""
for a in "$@"; do
  case " $* " in *" checkpoint "*) [ "$prev" = --image-path ] && echo pages >"$a/pages.img" && echo state >"$a/checkpoint.img" ;; esac
  prev="$a"
done
exit 0
`,
  );
  chmodSync(path.join(bin, 'runsc'), 0o755);
  const containers = path.join(tmp, 'containers');
  mkdirSync(path.join(containers, ID), { recursive: true });
  const handed = (name: string) => {
    const dir = path.join(tmp, name);
    mkdirSync(dir, { recursive: true });
    return dir;
  };
  const run = (args: string[], env: Record<string, string> = {}) =>
    spawnSync(path.join(bin, 'runsc-tether'), args, { encoding: 'utf8', env: { ...process.env, ...env } });
  const lastCall = () => readFileSync(calls, 'utf8').trim().split('\n').at(-1) ?? '';
  return { containers, handed, run, lastCall };
}

const engineFlags = (containers: string) => ['--platform=ptrace', `--tether-containers=${containers}`, '--root', '/r'];
const kept = (containers: string) => path.join(containers, ID, 'tether-memory');

test('a checkpoint is written into its container directory and the engine is handed a file naming it', () => {
  const { containers, handed, run, lastCall } = setUp();
  const engineDir = handed('ctd-checkpoint');
  const r = run([...engineFlags(containers), 'checkpoint', '--image-path', engineDir, '--work-path', '/w', ID]);
  assert.equal(r.status, 0, r.stderr);
  const images = readdirSync(kept(containers));
  assert.equal(images.length, 1);
  const image = path.join(kept(containers), images[0]);
  assert.equal(readFileSync(path.join(engineDir, 'tether-image'), 'utf8').trim(), image);
  const given = readdirSync(engineDir);
  assert.ok(given.includes('tether-image'), 'the engine copies one line, not the image');
  assert.equal(given.length, 2);
  assert.match(given.find((f) => f !== 'tether-image') ?? '', /^\.wh\.tether-\d+$/, 'and an entry unpacking drops');
  assert.ok(existsSync(path.join(image, 'pages.img')));
  assert.equal(
    lastCall(),
    `--platform=ptrace --root /r checkpoint -compression=none --image-path ${image} --work-path /w ${ID}`,
  );
});

test('a restore reads the image the handed file names, then removes it; a second checkpoint replaces the first', async () => {
  const { containers, handed, run, lastCall } = setUp();
  const first = handed('first');
  assert.equal(run([...engineFlags(containers), 'checkpoint', `--image-path=${first}`, ID]).status, 0);
  const second = handed('second');
  assert.equal(run([...engineFlags(containers), 'checkpoint', '--image-path', second, ID]).status, 0);
  const image = readFileSync(path.join(second, 'tether-image'), 'utf8').trim();
  assert.deepEqual(readdirSync(kept(containers)), [path.basename(image)], 'one image per container');

  const r = run([...engineFlags(containers), 'restore', '--image-path', second, '--detach', ID]);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(lastCall(), `--platform=ptrace --root /r restore -background --image-path ${image} --detach ${ID}`);
  // Removed after the restore has returned, not on its way.
  for (const until = Date.now() + 5000; existsSync(image) && Date.now() < until; ) await sleep(20);
  assert.equal(existsSync(image), false, 'the sandbox holds its files: the image is removed');

  const again = run([...engineFlags(containers), 'restore', '--image-path', second, ID]);
  assert.notEqual(again.status, 0);
  assert.match(again.stderr, /the checkpoint image .* is gone/);
});

test('a failed checkpoint leaves no image and no handed file; a failed restore keeps the image', () => {
  const { containers, handed, run } = setUp();
  const dir = handed('failed');
  assert.notEqual(run([...engineFlags(containers), 'checkpoint', '--image-path', dir, ID], { FAIL: '1' }).status, 0);
  assert.deepEqual(readdirSync(kept(containers)), []);
  assert.deepEqual(readdirSync(dir), []);

  const ok = handed('ok');
  assert.equal(run([...engineFlags(containers), 'checkpoint', '--image-path', ok, ID]).status, 0);
  const image = readFileSync(path.join(ok, 'tether-image'), 'utf8').trim();
  assert.notEqual(run([...engineFlags(containers), 'restore', '--image-path', ok, ID], { FAIL: '1' }).status, 0);
  assert.ok(existsSync(path.join(image, 'checkpoint.img')), 'kept for the gateway to fall back from');
});

test('a handed file naming another container’s image is refused', () => {
  const { containers, handed, run } = setUp();
  const dir = handed('forged');
  mkdirSync(path.join(containers, 'other', 'tether-memory', '1'), { recursive: true });
  writeFileSync(path.join(dir, 'tether-image'), `${path.join(containers, 'other', 'tether-memory', '1')}\n`);
  const r = run([...engineFlags(containers), 'restore', '--image-path', dir, ID]);
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /not an image of container c0ffee/);
});

test('without the flag, or for a container the engine keeps no directory for, calls go through as given', () => {
  const { containers, handed, run, lastCall } = setUp();
  const dir = handed('plain');
  assert.equal(run(['--root', '/r', 'checkpoint', '--image-path', dir, ID]).status, 0);
  assert.equal(lastCall(), `--root /r checkpoint -compression=none --image-path ${dir} ${ID}`);
  assert.ok(existsSync(path.join(dir, 'pages.img')));
  const other = handed('other');
  assert.equal(run([...engineFlags(containers), 'checkpoint', '--image-path', other, 'unknown']).status, 0);
  assert.ok(existsSync(path.join(other, 'pages.img')));
  assert.equal(run([...engineFlags(containers), 'start', ID]).status, 0);
  assert.equal(lastCall(), `--platform=ptrace --root /r start ${ID}`);
});
