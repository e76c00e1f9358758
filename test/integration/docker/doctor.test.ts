import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { defaultConfig } from '../../../gateway/src/config';
import { diagnose } from '../../../gateway/src/doctor';
import { runnerImage } from './support';

const run = promisify(execFile);
const bin = path.resolve(__dirname, '../../../../bin/tether');
const config = (docker: Partial<ReturnType<typeof defaultConfig>['docker']>) => ({
  ...defaultConfig(),
  docker: { ...defaultConfig().docker, ...docker },
});
const byName = (checks: Awaited<ReturnType<typeof diagnose>>) => Object.fromEntries(checks.map((c) => [c.name, c]));

test('doctor: a reachable engine, its default runtime and the built image are all ok', async () => {
  const c = byName(await diagnose(config({ image: runnerImage() })));
  assert.equal(c.engine.status, 'ok', c.engine.detail);
  assert.equal(c.runtime.status, 'ok');
  assert.match(c.runtime.detail, /runc/);
  assert.equal(c.image.status, 'ok');
  assert.match(c.image.detail, /user 1000:1000/);
  // The set-up turns it on: runs outlive an engine restart (engineRestart.test.ts).
  assert.equal(c['live-restore'].status, 'ok', c['live-restore'].detail);
  // runc on the engine's default runtime: the engine's checkpoint API is on, runc cannot use it.
  assert.match(c.pause.detail, /^portable depth only: the runtime runc \(.*\) cannot checkpoint a running sandbox/);
});

test('doctor: the warm pool as configured, and a warning when its limits keep it below its size', async () => {
  const c = byName(await diagnose(config({ image: runnerImage() })));
  assert.equal(c.pool.status, 'ok');
  assert.match(c.pool.detail, /2 warm sandbox\(es\) for the default limits/);
  const small = byName(
    await diagnose({
      ...config({ image: runnerImage() }),
      pool: { size: 4, maxTotal: 8, maxMemoryMb: 4096, concurrency: 1, templates: {} },
    }),
  );
  assert.equal(small.pool.status, 'warn');
  assert.match(small.pool.fix ?? '', /keeps the pool at 2/);
  const off = byName(
    await diagnose({
      ...config({ image: runnerImage() }),
      pool: { size: 0, maxTotal: 8, maxMemoryMb: 4096, concurrency: 1, templates: {} },
    }),
  );
  assert.match(off.pool.detail, /^off/);
});

test('doctor: a missing image and an unregistered runtime fail, each with what to do', async () => {
  const c = byName(await diagnose(config({ image: 'tether-runner:does-not-exist', runtime: 'no-such-runtime' })));
  assert.equal(c.image.status, 'fail');
  assert.match(c.image.fix ?? '', /scripts\/setup\.sh/);
  assert.equal(c.runtime.status, 'fail');
  assert.match(c.runtime.fix ?? '', /daemon\.json/);
});

test('doctor: no engine on the socket fails with the fix; the CLI exits non-zero', async () => {
  const c = byName(await diagnose(config({ socketPath: '/nonexistent/docker.sock' })));
  assert.equal(c.engine.status, 'fail');
  assert.match(c.engine.fix ?? '', /setup\.sh/);
  const res = await run(process.execPath, [bin, 'doctor'], {
    env: { ...process.env, DOCKER_SOCKET: '/nonexistent/docker.sock' },
  }).then(
    () => ({ code: 0, out: '' }),
    (e) => ({ code: e.code as number, out: String(e.stdout) }),
  );
  assert.equal(res.code, 1);
  assert.match(res.out, /FAIL\s+engine/);
});

test('doctor: the CLI reports ready against this machine', async () => {
  const { stdout } = await run(process.execPath, [bin, 'doctor'], {
    env: { ...process.env, TETHER_IMAGE: runnerImage(), TETHER_TOKENS: 'a=b' },
  });
  assert.match(stdout, /ok\s+engine/);
  assert.match(stdout, /ok\s+image/);
  assert.match(stdout, /ready: the gateway can create runs/);
});
