import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { RunState } from '@tether/contract';
import { resultText } from '../../../clients/typescript/src';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { containerOf, docker, dockerConfig, execIn, removeInstance } from './support';
import { PID1_PROBE, pid1Findings } from './pid1Probe';

// The OCI runtime is configurable: a run under gVisor (runsc), when the engine has it
// registered (see docs/containers.md). Skipped, saying so, where it does not.
const RUNTIME = process.env.TETHER_TEST_RUNTIME ?? 'runsc';
let t: TestGateway | undefined;
let skip: string | false = false;

before(async () => {
  const info = (await docker.info()) as { Runtimes?: Record<string, unknown> };
  if (!Object.keys(info.Runtimes ?? {}).includes(RUNTIME)) {
    skip = `the engine has no ${RUNTIME} runtime registered`;
    return;
  }
  t = await startTestGateway({ provider: 'docker', docker: { ...dockerConfig(), runtime: RUNTIME } });
});
after(async () => {
  await t?.close();
  if (t) await removeInstance(t.config.instance);
});

test(`a run under the ${RUNTIME} runtime answers tools, moves files and stays hardened`, async (ctx) => {
  if (skip || !t) return ctx.skip(skip || 'no gateway');
  const run = await t.alice.createRun({ conversationId: 'runtime' });
  assert.equal(run.state, RunState.READY, run.error);
  await t.alice.putFileMap(run.runId, { 'src/a.txt': 'under another runtime\n' });
  const out = await t.alice.callTool(run.runId, 'read', { path: 'src/a.txt' });
  assert.match(resultText(out.result), /under another runtime/);
  const w = await t.alice.callTool(run.runId, 'write', { path: 'b.txt', content: 'written inside\n' });
  assert.equal(w.result.isError, false, resultText(w.result));
  assert.ok((await t.alice.getFiles(run.runId, 'b.txt')).includes('written inside'));
  const box = await containerOf(run.runId);
  assert.equal((await box.inspect()).HostConfig.Runtime, RUNTIME);
  const probe = await execIn(box, [
    'bash',
    '-c',
    'id -u; touch /usr/x 2>/dev/null && echo WROTE || echo ro; ls /sys/class/net 2>/dev/null || echo no-sysfs-net; dmesg 2>/dev/null | head -1',
  ]);
  assert.match(probe.stdout, /^1000\nro\n/, probe.stdout + probe.stderr);
  assert.doesNotMatch(probe.stdout, /eth0/);
  await t.alice.deleteRun(run.runId);
});

test(`under ${RUNTIME}: what code in the run reaches of PID 1 and the runner, and that stdin is not heard`, async (ctx) => {
  if (skip || !t) return ctx.skip(skip || 'no gateway');
  const run = await t.alice.createRun({ conversationId: 'runtime-pid1', features: { eval: true } });
  assert.equal(run.state, RunState.READY, run.error);
  await t.alice.putFileMap(run.runId, { 'a.txt': 'still served\n' });
  // The socket is in use (the engine registers runsc with --host-uds=all), so the runner has
  // retired its stdio: a `runner/shutdown` written into PID 1's or the runner's stdin is not heard.
  assert.equal(t.gateway.runs.ready('alice', run.runId).runner.transport, 'unix');
  const out = await t.alice.callTool(run.runId, 'eval', {
    code: PID1_PROBE,
    description: 'probe PID 1 and the runner',
  });
  const found = pid1Findings(resultText(out.result));
  ctx.diagnostic(`under ${RUNTIME}: ${JSON.stringify(found)}`);
  // The execute-only binaries cannot load here: the entry points use the readable ones.
  assert.equal(found.init, '/usr/bin/tini');
  await new Promise((r) => setTimeout(r, 1000));
  const read = await t.alice.callTool(run.runId, 'read', { path: 'a.txt' });
  assert.match(resultText(read.result), /still served/, 'the run goes on whatever reached its stdin');
  assert.equal((await t.alice.getRun(run.runId)).state, RunState.READY);
  await t.alice.deleteRun(run.runId);
});

test(`under ${RUNTIME}: a run pauses, resumes with its kernel variable, and forks`, async (ctx) => {
  if (skip || !t) return ctx.skip(skip || 'no gateway');
  const run = await t.alice.createRun({ conversationId: 'runtime-pause', features: { eval: true } });
  assert.equal(run.state, RunState.READY, run.error);
  const cell = async (runId: string, code: string) => {
    const out = await t!.alice.callTool(runId, 'eval', { code, description: 'a cell under another runtime' });
    assert.equal(out.result.isError, false, resultText(out.result));
    return resultText(out.result);
  };
  assert.match(await cell(run.runId, 'kept = 6 * 7\nkept'), /42/);
  assert.equal((await t.alice.pauseRun(run.runId)).state, RunState.PAUSED);
  assert.match(await cell(run.runId, 'kept + 1'), /43/);
  // The copy of the workspace is made under the same runtime.
  const [fork] = await t.alice.forkRun(run.runId, 1);
  assert.equal(fork?.state, RunState.READY, fork?.error);
  assert.match(await cell(fork!.runId, 'kept + 2'), /44/);
  assert.equal((await (await containerOf(fork!.runId)).inspect()).HostConfig.Runtime, RUNTIME);
  for (const id of [run.runId, fork!.runId]) await t.alice.deleteRun(id);
});
