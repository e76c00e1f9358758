import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { existsSync, mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { status } from '@grpc/grpc-js';
import { PauseDepth, RunState } from '@tether/contract';
import { resultText, TetherClient } from '@tether/client';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { freePort } from '../../helpers/ports';
import { containersOf, docker, dockerConfig, removeInstance, serveGateway, until } from './support';

// Portable pauses against the real engine and the real runner image: the sandbox goes, the
// workspace volume stays, and a kernel's variables and a staged edit come back.
let t: TestGateway;
const instance = `pause-${process.pid}`;
const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tether-pause-'));
const features = { eval: true, ast: true, questions: { enabled: true, targetSpace: 'test' } };
const start = (runs = {}) =>
  startTestGateway({
    provider: 'docker',
    docker: dockerConfig(),
    instance,
    stateDir,
    runs: { idlePauseSeconds: 0, ...runs },
  });

before(async () => {
  t = await start();
});
after(async () => {
  await t?.close();
  await removeInstance(instance);
});

async function evalIn(c: TetherClient, runId: string, code: string): Promise<string> {
  const out = await c.callTool(runId, 'eval', { code, description: 'a cell of the pause tests' });
  assert.equal(out.result.isError, false, resultText(out.result));
  return resultText(out.result);
}

async function volumeOf(runId: string): Promise<string> {
  const [c] = await containersOf(runId);
  const info = await docker.getContainer(c!.Id).inspect();
  return info.Mounts.find((m) => m.Destination === '/workspace')!.Name!;
}

const NOT_FOUND = (e: { code: number }) => e.code === status.NOT_FOUND;

test('pause lets go of the container and keeps the volume; a call resumes it with the variable and the staged edit', async () => {
  const run = await t.alice.createRun({ conversationId: 'pause', features });
  assert.equal(run.state, RunState.READY, run.error);
  await t.alice.putFileMap(run.runId, { 'm.py': 'old_api(1, 2)\n' });
  assert.match(await evalIn(t.alice, run.runId, 'rows = {i: i * i for i in range(1000)}\nlen(rows)'), /1000/);
  const staged = await t.alice.callTool(run.runId, 'ast_edit', {
    pattern: 'old_api($A, $B)',
    rewrite: 'new_api($B, $A)',
    path: '.',
  });
  assert.equal(staged.result.isError, false, resultText(staged.result));
  const editId = JSON.parse(staged.result.structuredJson).edit_id as string;
  const volume = await volumeOf(run.runId);

  await assert.rejects(t.bob.pauseRun(run.runId), NOT_FOUND);
  const paused = await t.alice.pauseRun(run.runId);
  assert.equal(paused.state, RunState.PAUSED);
  assert.equal(paused.pause?.depth, PauseDepth.PORTABLE);
  assert.ok(Number(paused.pause?.stateBytes) > 0, 'the state was written');
  assert.equal((await containersOf(run.runId)).length, 0, 'no container of the run is left');
  await docker.getVolume(volume).inspect();
  assert.equal((await t.alice.getRun(run.runId)).state, RunState.PAUSED);
  await assert.rejects(t.bob.resumeRun(run.runId), NOT_FOUND);

  // The next call resumes it: the caller sees no error, and the first result says so.
  const first = await t.alice.callTool(run.runId, 'eval', {
    code: 'rows[999]',
    description: 'the variable after a resume',
  });
  assert.equal(first.result.isError, false, resultText(first.result));
  assert.match(resultText(first.result), /998001/);
  assert.match(resultText(first.result), /paused|resumed/i, 'the first result after the resume says it was resumed');
  assert.equal(await volumeOf(run.runId), volume, 'the new container is on the same volume');
  const again = await t.alice.callTool(run.runId, 'eval', { code: 'len(rows)', description: 'a later call' });
  assert.doesNotMatch(resultText(again.result), /resumed/i, 'only the first result carries the notice');
  const resolved = await t.alice.callTool(run.runId, 'resolve', { edit_id: editId, action: 'accept' });
  assert.equal(resolved.result.isError, false, resultText(resolved.result));
  const file = await t.alice.callTool(run.runId, 'read', { path: 'm.py' });
  assert.match(resultText(file.result), /new_api\(2, 1\)/);
  // A bridged call from a cell works right after a resume.
  assert.match(await evalIn(t.alice, run.runId, 'tool("read", {"path": "m.py"}).structured["totalLines"]'), /1/);

  await t.alice.deleteRun(run.runId);
  await assert.rejects(docker.getVolume(volume).inspect(), /no such volume/i);
});

test('PutFiles and GetFiles resume a paused run; ResumeRun brings one back before any call', async () => {
  const run = await t.alice.createRun({ conversationId: 'files', features });
  await t.alice.putFileMap(run.runId, { 'a.txt': 'kept\n' });
  await t.alice.pauseRun(run.runId);
  const files = await t.alice.getFileMap(run.runId, 'a.txt');
  assert.equal(files['a.txt']?.toString(), 'kept\n');
  assert.equal((await t.alice.getRun(run.runId)).state, RunState.READY);

  await t.alice.pauseRun(run.runId);
  await t.alice.putFileMap(run.runId, { 'b.txt': 'while paused\n' });
  assert.equal((await t.alice.getRun(run.runId)).state, RunState.READY);

  await t.alice.pauseRun(run.runId);
  const resumed = await t.alice.resumeRun(run.runId);
  assert.equal(resumed.state, RunState.READY);
  assert.ok(resumed.pause?.resumedAt, 'the last pause is reported with its resume');
  assert.equal((await t.alice.resumeRun(run.runId)).state, RunState.READY, 'resuming a ready run returns it');
  await t.alice.deleteRun(run.runId);
});

test('an idle run is paused on its own; a restarted gateway finds it paused and resumes it on the next call', async () => {
  t.alice.close();
  t.bob.close();
  await t.gateway.close();
  t = await start({ idlePauseSeconds: 1 });
  const run = await t.alice.createRun({ conversationId: 'idle', features });
  assert.match(await evalIn(t.alice, run.runId, 'answer = 6 * 7\nanswer'), /42/);
  await until('the idle run paused', async () => (await t.alice.getRun(run.runId)).state === RunState.PAUSED, 30_000);
  assert.equal((await t.alice.getRun(run.runId)).pause?.reason, 'idle');

  t.alice.close();
  t.bob.close();
  await t.gateway.close({ keepRuns: true });
  t = await start();
  assert.equal((await t.alice.getRun(run.runId)).state, RunState.PAUSED);
  await assert.rejects(t.bob.getRun(run.runId), NOT_FOUND);
  // The Calls message resumes it; a question card works right after.
  assert.match(await evalIn(t.alice, run.runId, 'answer + 1'), /43/);
  const asked = await t.alice.callTool(
    run.runId,
    'ask_user',
    { question: 'after the resume?' },
    { onQuestion: (q) => ({ freeText: `seen: ${q.question}` }) },
  );
  assert.equal(asked.result.isError, false, resultText(asked.result));
  assert.match(resultText(asked.result), /seen: after the resume\?/);
  await t.alice.deleteRun(run.runId);
});

test('forks: each has the variable and the files; a write in one is seen by no other; the parent goes on', async () => {
  const parent = await t.alice.createRun({ conversationId: 'fork', features });
  await t.alice.putFileMap(parent.runId, { 'shared.txt': 'from the parent\n' });
  assert.match(await evalIn(t.alice, parent.runId, 'seed = [n * 3 for n in range(10)]\nseed[-1]'), /27/);
  await assert.rejects(t.bob.forkRun(parent.runId, 2), NOT_FOUND);
  const forks = await t.alice.forkRun(parent.runId, 2);
  assert.equal(forks.length, 2);
  for (const f of forks) {
    assert.equal(f.state, RunState.READY, f.error);
    assert.equal(f.forkedFrom, parent.runId);
    const first = await t.alice.callTool(f.runId, 'eval', { code: 'seed[-1]', description: 'the variable in a fork' });
    assert.match(resultText(first.result), /27/);
    assert.match(resultText(first.result), new RegExp(`fork of run ${parent.runId}`));
  }
  const [a, b] = forks as [(typeof forks)[0], (typeof forks)[0]];
  await t.alice.putFileMap(a.runId, { 'shared.txt': 'changed in fork a\n', 'only-a.txt': 'a\n' });
  assert.match(await evalIn(t.alice, a.runId, 'seed.append(99)\nlen(seed)'), /11/);
  for (const other of [parent.runId, b.runId]) {
    const files = await t.alice.getFileMap(other, '');
    assert.equal(files['shared.txt']?.toString(), 'from the parent\n', other);
    assert.equal(files['only-a.txt'], undefined, other);
    assert.match(await evalIn(t.alice, other, 'len(seed)'), /10/);
  }
  assert.equal((await t.alice.getRun(parent.runId)).state, RunState.READY);
  for (const id of [parent.runId, a.runId, b.runId]) await t.alice.deleteRun(id);
});

test('a fork past the disk quota is refused whole: no run, no volume left', async () => {
  t.alice.close();
  t.bob.close();
  await t.gateway.close();
  t = await startTestGateway({
    provider: 'docker',
    docker: dockerConfig(),
    instance,
    stateDir,
    runs: { idlePauseSeconds: 0 },
    tenancy: { default: { diskMb: 3 * 64 } },
  });
  const parent = await t.alice.createRun({ conversationId: 'quota', features, limits: { diskMb: 64 } });
  assert.equal(parent.state, RunState.READY, parent.error);
  const volumes = async () =>
    (await docker.listVolumes({ filters: JSON.stringify({ label: [`dev.tether.instance=${instance}`] }) })).Volumes
      ?.length ?? 0;
  const before = await volumes();
  await assert.rejects(
    t.alice.forkRun(parent.runId, 3),
    (e: { code: number; details: string }) => e.code === status.RESOURCE_EXHAUSTED && /disk/i.test(e.details),
  );
  assert.deepEqual(
    (await t.alice.listRuns()).map((r) => r.runId),
    [parent.runId],
  );
  assert.equal(await volumes(), before, 'no volume was made');
  const two = await t.alice.forkRun(parent.runId, 2);
  assert.deepEqual(
    two.map((r) => r.state),
    [RunState.READY, RunState.READY],
  );
  for (const r of [parent, ...two]) await t.alice.deleteRun(r.runId);
});

test('a gateway killed outright while pausing, then while resuming: the run is found PAUSED, never half-restored, and nothing is left over', async () => {
  const crash = `${instance}-crash`;
  const crashState = mkdtempSync(path.join(os.tmpdir(), 'tether-pause-crash-'));
  const port = await freePort();
  const serve = () =>
    serveGateway({
      TETHER_TOKENS: 'crash-token=acme',
      TETHER_INSTANCE: crash,
      TETHER_STATE_DIR: crashState,
      TETHER_LISTEN: `127.0.0.1:${port}`,
      TETHER_HTTP_LISTEN: 'off',
      TETHER_IMAGE: dockerConfig().image,
      TETHER_PROVIDER: 'docker',
      TETHER_POOL_SIZE: '0',
    });
  const kill = async (g: ReturnType<typeof serve>) => {
    g.child.kill('SIGKILL');
    await once(g.child, 'exit');
  };
  const client = new TetherClient(`127.0.0.1:${port}`, 'crash-token');
  const volumes = async (runId: string) =>
    (await docker.listVolumes({ filters: JSON.stringify({ label: [`dev.tether.run-id=${runId}`] }) })).Volumes ?? [];
  let g = serve();
  try {
    await g.ready;
    const run = await client.createRun({ conversationId: 'crash', features: { eval: true } });
    assert.equal(run.state, RunState.READY, run.error);
    assert.match(await evalIn(client, run.runId, 'kept = "through two crashes"\nkept'), /through two crashes/);
    const record = path.join(crashState, 'paused', crash, `${run.runId}.json`);

    // Killed once the pause is recorded, before the sandbox is gone.
    const pausing = client.pauseRun(run.runId).catch(() => undefined);
    await until('the pause recorded', async () => existsSync(record), 30_000, 2);
    await kill(g);
    await pausing;
    g = serve();
    await g.ready;
    assert.equal((await client.getRun(run.runId)).state, RunState.PAUSED, 'the record decides: the run is paused');
    assert.equal((await containersOf(run.runId)).length, 0, 'the pause was completed: no container is left');

    // Killed while a call resumes it: the new sandbox is up, its restore not seen to finish.
    const resuming = evalIn(client, run.runId, 'kept').catch(() => undefined);
    await until('the resume under way', async () => (await containersOf(run.runId)).length === 1, 30_000, 10);
    await kill(g);
    await resuming;
    g = serve();
    await g.ready;
    assert.equal((await client.getRun(run.runId)).state, RunState.PAUSED, 'a resume nobody saw finish is not trusted');
    assert.equal((await containersOf(run.runId)).length, 0);
    assert.match(await evalIn(client, run.runId, 'kept'), /through two crashes/);
    assert.equal((await containersOf(run.runId)).length, 1);
    assert.equal((await volumes(run.runId)).length, 1, 'one workspace, the same one throughout');
    await client.deleteRun(run.runId);
    assert.equal((await volumes(run.runId)).length, 0);
    assert.ok(!existsSync(record), 'the record went with the run');
  } finally {
    client.close();
    g.child.kill('SIGINT');
    if (g.child.exitCode === null) await once(g.child, 'exit');
    await removeInstance(crash);
  }
});
