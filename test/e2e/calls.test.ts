import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import { Gateway, Status, TetherClient, isTetherError } from '@tether/client';
import { grpcDefinition } from '@tether/contract/grpc';
import { startTestGateway, type TestGateway } from '../helpers/gateway';

// The shared Calls stream against a real gateway and runner: every TetherClient carries its
// tool calls on one stream unless told otherwise, so the rest of the suite exercises it too.
let t: TestGateway;
let c: TetherClient;
let opened = 0;
before(async () => {
  t = await startTestGateway({ provider: 'process', questions: { timeoutSeconds: 10 } });
  c = new TetherClient(t.gateway.address, 'token-alice');
  const open = c.raw.calls.bind(c.raw);
  c.raw.calls = (...args: unknown[]) => {
    opened++;
    return open(...args);
  };
});
after(async () => {
  c?.close();
  await t?.close();
});

test('forty calls at once on one stream, with a question card and a bridged call among them: each gets its own result', async () => {
  const run = await c.createRun({ features: { eval: true, questions: { enabled: true, targetSpace: 'ts' } } });
  const files = Object.fromEntries(Array.from({ length: 38 }, (_, i) => [`f${i}.txt`, `content ${i}\n`]));
  await c.putFileMap(run.runId, files);
  const before = opened;
  const reads = Object.keys(files).map((f) => c.callTool(run.runId, 'read', { path: f }));
  const asked = c.callTool(
    run.runId,
    'ask_user',
    { question: 'Ship it?' },
    { onQuestion: (q) => ({ freeText: `yes to ${q.question}` }) },
  );
  const bridged = c.callTool(
    run.runId,
    'eval',
    { code: 'print(tool("client_echo", {"say": "hi"}))', description: 'call a tool the client owns' },
    { onBridgeCall: (_b, args) => `echo ${(args as { say: string }).say}` },
  );
  const out = await Promise.all(reads);
  out.forEach((o, i) => {
    assert.equal(o.isError, false, o.text);
    assert.match(o.text, new RegExp(`content ${i}\\b`));
  });
  assert.match((await asked).text, /yes to Ship it\?/);
  const b = await bridged;
  assert.equal(b.isError, false, b.text);
  assert.match(b.text, /echo hi/);
  assert.equal(opened - before <= 1, true, `${opened - before} streams opened for one burst`);
  await c.deleteRun(run.runId);
});

test('the shared stream is half-closed after a second without calls; the next call opens another', async () => {
  const run = await c.createRun({});
  await c.putFileMap(run.runId, { 'a.txt': 'x\n' });
  await c.callTool(run.runId, 'read', { path: 'a.txt' });
  const before = opened;
  await c.callTool(run.runId, 'read', { path: 'a.txt' });
  assert.equal(opened, before, 'back to back, calls share the stream');
  await new Promise((r) => setTimeout(r, 1300));
  await c.callTool(run.runId, 'read', { path: 'a.txt' });
  assert.equal(opened, before + 1, 'after a second idle, a new stream');
  await c.deleteRun(run.runId);
});

test('a deadline ends the call with DEADLINE_EXCEEDED and stops its tool; the next call runs', async () => {
  const run = await c.createRun({ features: { eval: true } });
  const began = Date.now();
  await assert.rejects(
    c.callTool(
      run.runId,
      'eval',
      { code: 'import time\ntime.sleep(30)', description: 'sleep past the deadline of the call' },
      { deadlineMs: 500 },
    ),
    (e) => isTetherError(e, Status.DEADLINE_EXCEEDED),
  );
  assert.ok(Date.now() - began < 5000);
  const runner = t.gateway.runs.get('alice', run.runId).runner!;
  for (let i = 0; i < 200 && runner.busy; i++) await new Promise((r) => setTimeout(r, 50));
  assert.equal(runner.busy, false, 'the cancel reached the tool');
  const next = await c.callTool(run.runId, 'eval', {
    code: 'print(6 * 7)',
    description: 'print a product after the cancel',
  });
  assert.match(next.text, /42/);
  await c.deleteRun(run.runId);
});

test("another tenant's run is NOT_FOUND for that call only; a bad token fails the stream", async () => {
  const run = await c.createRun({});
  await c.putFileMap(run.runId, { 'a.txt': 'mine\n' });
  const bob = new TetherClient(t.gateway.address, 'token-bob');
  const [stolen, own] = await Promise.allSettled([
    bob.callTool(run.runId, 'read', { path: 'a.txt' }),
    c.callTool(run.runId, 'read', { path: 'a.txt' }),
  ]);
  assert.ok(
    stolen.status === 'rejected' && isTetherError(stolen.reason, Status.NOT_FOUND),
    String(stolen.status === 'rejected' ? stolen.reason : 'answered'),
  );
  assert.ok(own.status === 'fulfilled' && /mine/.test(own.value.text));
  const mallory = new TetherClient(t.gateway.address, 'token-nobody');
  await assert.rejects(mallory.callTool(run.runId, 'read', { path: 'a.txt' }), (e) =>
    isTetherError(e, Status.UNAUTHENTICATED),
  );
  bob.close();
  mallory.close();
  await c.deleteRun(run.runId);
});

test('a gateway without Calls: the client falls back to one CallTool stream per call', async () => {
  // An older gateway's surface: CallTool only (forwarded to the real one), every other method UNIMPLEMENTED.
  const upstream = new TetherClient(t.gateway.address, 'token-alice', { multiplex: false });
  const server = new grpc.Server();
  server.addService(grpcDefinition(Gateway), {
    callTool: (down: grpc.ServerDuplexStream<unknown, unknown>) => {
      const up = upstream.raw.callTool(down.metadata) as grpc.ClientDuplexStream<unknown, unknown>;
      down.on('data', (m) => up.write(m));
      down.on('end', () => up.end());
      up.on('data', (m) => down.write(m));
      up.on('end', () => down.end());
      up.on('error', (e) => down.emit('error', e));
    },
  });
  const port = await new Promise<number>((res, rej) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? rej(e) : res(p))),
  );
  const old = new TetherClient(`127.0.0.1:${port}`, 'token-alice');
  const run = await c.createRun({});
  await c.putFileMap(run.runId, { 'a.txt': 'through the old surface\n' });
  const [one, two] = await Promise.all([
    old.callTool(run.runId, 'read', { path: 'a.txt' }),
    old.callTool(run.runId, 'read', { path: 'a.txt' }),
  ]);
  assert.match(one.text, /through the old surface/);
  assert.match(two.text, /through the old surface/);
  assert.match((await old.callTool(run.runId, 'read', { path: 'a.txt' })).text, /through the old surface/);
  old.close();
  upstream.close();
  server.forceShutdown();
  await c.deleteRun(run.runId);
});

test('a gateway shutting down lets the calls on the stream finish, then ends it', async () => {
  const own = await startTestGateway({ provider: 'process' });
  try {
    const run = await own.alice.createRun({ features: { eval: true } });
    const slow = own.alice.callTool(run.runId, 'eval', {
      code: 'import time\ntime.sleep(1)\nprint("finished")',
      description: 'sleep a second while the gateway stops',
    });
    await new Promise((r) => setTimeout(r, 300));
    const closing = own.gateway.close({ keepRuns: false });
    const out = await slow;
    assert.match(out.text, /finished/);
    await closing;
  } finally {
    await own.close();
  }
});

test('after the gateway restarts on the same address, the next call opens a new stream there', async () => {
  const first = await startTestGateway({ provider: 'process' });
  const address = first.gateway.address;
  const client = new TetherClient(address, 'token-alice');
  try {
    const run = await client.createRun({});
    await client.putFileMap(run.runId, { 'a.txt': 'before\n' });
    assert.match((await client.callTool(run.runId, 'read', { path: 'a.txt' })).text, /before/);
    await first.close();
    const second = await startTestGateway({ provider: 'process', listen: address });
    try {
      const again = await client.createRun({});
      await client.putFileMap(again.runId, { 'a.txt': 'after\n' });
      assert.match((await client.callTool(again.runId, 'read', { path: 'a.txt' })).text, /after/);
    } finally {
      await second.close();
    }
  } finally {
    client.close();
  }
});
