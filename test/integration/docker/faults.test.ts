import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import { RunState, type Question } from '@tether/contract';
import * as tarStream from 'tar-stream';
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { TetherClient, resultText, tarOf } from '../../../clients/typescript/src';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { containerOf, containersOf, docker, dockerConfig, removeInstance, serveGateway, until } from './support';
import { freePort } from '../../helpers/ports';

// Faults against real containers. A call that is pending inside the runner is an `ask_user`
// whose card nobody answers: it stays open until the test breaks something.
let t: TestGateway;
const instance = `faults-${process.pid}`;
const features = { questions: { enabled: true, targetSpace: 'test' } };

// A restart is the same gateway again: the same instance and the same state directory (its
// transport key proves it to the runners it started).
const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tether-faults-'));
const start = () => startTestGateway({ provider: 'docker', docker: dockerConfig(), instance, stateDir });

before(async () => {
  t = await start();
});
after(async () => {
  await t?.close();
  await removeInstance(instance);
});

async function newRun(client: TetherClient = t.alice, files: Record<string, string> = {}) {
  const run = await client.createRun({ conversationId: 'faults', features });
  assert.equal(run.state, RunState.READY, run.error);
  if (Object.keys(files).length) await client.putFileMap(run.runId, files);
  return run.runId;
}

/** Starts a call that blocks in the runner; resolves `asked` once the card reached the client. */
function pendingCall(client: TetherClient, runId: string) {
  let asked!: (q: Question) => void;
  const question = new Promise<Question>((r) => (asked = r));
  const outcome = client
    .callTool(
      runId,
      'ask_user',
      { question: 'hold on?' },
      { onQuestion: (q) => (asked(q), new Promise(() => undefined)) },
    )
    .then(
      (o) => ({ ok: true as const, text: resultText(o.result), code: undefined }),
      (e) => ({ ok: false as const, text: String(e.details ?? e.message), code: e.code as number }),
    );
  return { question, outcome };
}

async function read(client: TetherClient, runId: string, path: string) {
  const out = await client.callTool(runId, 'read', { path });
  assert.equal(out.result.isError, false, resultText(out.result));
  return resultText(out.result);
}

test('killing a run container mid-call ends the call with UNAVAILABLE at once; the run is FAILED, the gateway lives', async () => {
  const runId = await newRun(t.alice, { 'work.txt': 'half done\n' });
  const other = await newRun(t.alice, { 'a.txt': 'still here\n' });
  const call = pendingCall(t.alice, runId);
  await call.question;
  const killedAt = Date.now();
  await (await containerOf(runId)).kill();
  const res = await call.outcome;
  const ms = Date.now() - killedAt;
  assert.equal(res.code, status.UNAVAILABLE, res.text);
  assert.ok(ms < 10000, `the call ended ${ms} ms after the kill`);
  assert.equal((await t.alice.getRun(runId)).state, RunState.FAILED);
  // The container's own exit reason follows the connection's loss within moments.
  const run = await until('FAILED with the exit reason', async () => {
    const r = await t.alice.getRun(runId);
    return r.state === RunState.FAILED && /killed|exit/.test(r.error) ? r : undefined;
  });
  assert.match(run.error, /killed|exit/);
  const again = await t.alice.callTool(runId, 'read', { path: 'a.txt' }).then(
    () => undefined,
    (e) => e.code,
  );
  assert.equal(again, status.FAILED_PRECONDITION);
  // Its work is not lost: the dead run's workspace can still be taken out until DeleteRun.
  const saved = (await t.alice.getFiles(runId, 'work.txt')).toString('utf8');
  assert.match(saved, /work\.txt[\s\S]*half done/);
  assert.match(await read(t.alice, other, 'a.txt'), /still here/);
  await t.alice.deleteRun(runId);
  assert.equal((await containersOf(runId)).length, 0, 'DeleteRun removes a dead run container');
});

test('deleting a run during a call ends the call, removes the container and its workspace volume', async () => {
  const runId = await newRun(t.alice, { 'x.txt': 'x' });
  const [info] = await containersOf(runId);
  const volume = info.Mounts.find((m) => m.Destination === '/workspace')?.Name;
  assert.ok(volume, 'the workspace is a volume');
  const call = pendingCall(t.alice, runId);
  await call.question;
  await t.alice.deleteRun(runId);
  const res = await call.outcome;
  assert.equal(res.ok, false);
  assert.equal(res.code, status.UNAVAILABLE, res.text);
  assert.equal((await containersOf(runId)).length, 0);
  await assert.rejects(docker.getVolume(volume).inspect(), /no such volume/i);
  await assert.rejects(t.alice.getRun(runId), (e: { code: number }) => e.code === status.NOT_FOUND);
});

test("two tenants: neither can see, call or delete the other one's runs", async () => {
  const a = await newRun(t.alice, { 'secret.txt': 'alice only\n' });
  const b = await newRun(t.bob, { 'secret.txt': 'bob only\n' });
  assert.deepEqual(
    (await t.alice.listRuns()).map((r) => r.runId).filter((id) => id === b),
    [],
  );
  assert.deepEqual(
    (await t.bob.listRuns()).map((r) => r.runId).filter((id) => id === a),
    [],
  );
  const notFound = (e: { code: number }) => e.code === status.NOT_FOUND;
  await assert.rejects(t.bob.getRun(a), notFound);
  await assert.rejects(t.bob.callTool(a, 'read', { path: 'secret.txt' }), notFound);
  await assert.rejects(t.bob.getFiles(a, 'secret.txt'), notFound);
  await assert.rejects(t.bob.putFileMap(a, { 'x.txt': 'x' }), notFound);
  await assert.rejects(t.bob.deleteRun(a), notFound);
  await assert.rejects(t.alice.deleteRun(b), notFound);
  assert.match(await read(t.alice, a, 'secret.txt'), /alice only/);
  assert.match(await read(t.bob, b, 'secret.txt'), /bob only/);
  // Different containers, different volumes.
  const [ca] = await containersOf(a);
  const [cb] = await containersOf(b);
  const workspaceOf = (c: typeof ca) => c.Mounts.find((m) => m.Destination === '/workspace')?.Name;
  assert.ok(workspaceOf(ca));
  assert.notEqual(workspaceOf(ca), workspaceOf(cb));
  assert.equal(ca.Labels['dev.tether.tenant'], 'alice');
  assert.equal(cb.Labels['dev.tether.tenant'], 'bob');
  await t.alice.deleteRun(a);
  await t.bob.deleteRun(b);
});

test('a gateway restart with runs live: they keep answering with their workspace intact; orphans are removed', async () => {
  const runId = await newRun(t.alice, { 'src/keep.txt': 'survives the restart\n' });
  const failed = await newRun(t.alice);
  await (await containerOf(failed)).kill();
  await until('FAILED', async () => (await t.alice.getRun(failed)).state === RunState.FAILED);
  const before = (await containersOf(runId))[0].Id;

  t.alice.close();
  t.bob.close();
  await t.gateway.close({ keepRuns: true });
  assert.equal((await containersOf(runId, false)).length, 1, 'the run container outlives the gateway');
  // A workspace volume whose container was never made (the gateway died in between).
  const leftover = `tether-ws-run-leftover-${process.pid}`;
  await docker.createVolume({
    Name: leftover,
    Labels: {
      'dev.tether.managed': 'true',
      'dev.tether.instance': instance,
      'dev.tether.run-id': 'run-leftover',
      'dev.tether.tenant': 'alice',
    },
  });

  t = await start();
  const run = await t.alice.getRun(runId);
  assert.equal(run.state, RunState.READY, run.error);
  assert.equal((await containersOf(runId))[0].Id, before, 'the same container, re-attached');
  assert.match(await read(t.alice, runId, 'src/keep.txt'), /survives the restart/);
  assert.match(
    (await t.alice.callTool(runId, 'write', { path: 'after.txt', content: 'new\n' })).result.isError ? 'error' : 'ok',
    /ok/,
  );
  assert.match(await read(t.alice, runId, 'after.txt'), /new/);
  // The dead one was an orphan: removed on recovery, unknown to the new gateway.
  assert.equal((await containersOf(failed)).length, 0);
  await assert.rejects(t.alice.getRun(failed), (e: { code: number }) => e.code === status.NOT_FOUND);
  await assert.rejects(
    docker.getVolume(leftover).inspect(),
    (e: { statusCode: number }) => e.statusCode === 404,
    'the leftover volume is swept',
  );
  await t.alice.deleteRun(runId);
});

test('an idle run is stopped after the idle timeout and its container removed', async () => {
  const idle = await startTestGateway({
    provider: 'docker',
    docker: dockerConfig(),
    instance: `${instance}-idle`,
    runs: { idleTimeoutSeconds: 1 } as never,
  });
  try {
    const run = await idle.alice.createRun({ conversationId: 'idle' });
    assert.equal(run.state, RunState.READY, run.error);
    assert.equal((await containersOf(run.runId)).length, 1);
    // The sweeper looks every 5 s.
    await until(
      'the idle run container to vanish',
      async () => (await containersOf(run.runId)).length === 0,
      15000,
      250,
    );
    const after = await idle.alice.getRun(run.runId);
    assert.equal(after.state, RunState.STOPPED);
    assert.match(after.error, /idle/);
  } finally {
    await idle.close();
    await removeInstance(`${instance}-idle`);
  }
});

test('PutFiles: an archive with one bad entry is refused whole, with the reason; good ones land where asked', async () => {
  const runId = await newRun(t.alice);
  const tarWith = async (bad: Record<string, unknown>) => {
    const pack = tarStream.pack();
    pack.entry({ name: 'first.txt' }, 'first');
    pack.entry(bad as unknown as tarStream.Header, '');
    pack.finalize();
    const chunks: Buffer[] = [];
    for await (const c of pack as unknown as AsyncIterable<Buffer>) chunks.push(c);
    return Buffer.concat(chunks);
  };
  for (const [bad, why] of [
    [{ name: '../escape.txt', size: 0 }, /leaves the workspace/],
    [{ name: 'link', type: 'symlink', linkname: '/etc' }, /absolute link/],
    [{ name: 'up', type: 'symlink', linkname: '../../..' }, /leaves the workspace/],
    [{ name: 'fifo', type: 'fifo' }, /fifo refused/],
  ] as [Record<string, unknown>, RegExp][]) {
    await assert.rejects(
      t.alice.putFiles(runId, await tarWith(bad)),
      (e: { code: number; details: string }) => e.code === status.INVALID_ARGUMENT && why.test(e.details),
    );
  }
  const first = await t.alice.callTool(runId, 'read', { path: 'first.txt' });
  assert.equal(first.result.isError, true, 'nothing of a refused archive was written');

  await t.alice.putFiles(runId, await tarOf({ 'x.txt': 'in a subdirectory' }), 'deep/er');
  assert.match(await read(t.alice, runId, 'deep/er/x.txt'), /in a subdirectory/);
  const sub = await t.alice.getFiles(runId, 'deep');
  const names: string[] = [];
  const ex = tarStream.extract();
  ex.on('entry', (h, s, next) => (names.push(h.name), s.resume(), s.on('end', next)));
  await new Promise<void>((res) => (ex.on('finish', () => res()), ex.end(sub)));
  assert.deepEqual(names, ['deep/', 'deep/er/', 'deep/er/x.txt']);
  await assert.rejects(t.alice.getFiles(runId, 'no/such/path'), (e: { code: number }) => e.code === status.NOT_FOUND);
  await t.alice.deleteRun(runId);
});

test('a gateway killed outright (SIGKILL): the next one re-attaches, and the run answers with its workspace', async () => {
  const crashInstance = `${instance}-crash`;
  const port = await freePort();
  const serve = () =>
    serveGateway({
      TETHER_TOKENS: 'crash-token=acme',
      TETHER_INSTANCE: crashInstance,
      TETHER_LISTEN: `127.0.0.1:${port}`,
      TETHER_HTTP_LISTEN: 'off',
      TETHER_IMAGE: dockerConfig().image,
      TETHER_PROVIDER: 'docker',
      TETHER_POOL_SIZE: '0',
    });
  const client = new TetherClient(`127.0.0.1:${port}`, 'crash-token');
  let second: ReturnType<typeof serve> | undefined;
  try {
    const first = serve();
    await first.ready;
    const run = await client.createRun({ conversationId: 'crash' });
    assert.equal(run.state, RunState.READY, run.error);
    await client.putFileMap(run.runId, { 'kept.txt': 'through a crash\n' });
    first.child.kill('SIGKILL');
    await once(first.child, 'exit');
    assert.equal((await containersOf(run.runId, false)).length, 1, 'the run container outlives a crashed gateway');

    second = serve();
    await second.ready;
    assert.equal((await client.getRun(run.runId)).state, RunState.READY);
    assert.match(await read(client, run.runId, 'kept.txt'), /through a crash/);
    await client.deleteRun(run.runId);
  } finally {
    client.close();
    second?.child.kill('SIGINT');
    if (second) await once(second.child, 'exit');
    await removeInstance(crashInstance);
  }
});
