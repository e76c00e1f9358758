import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import { RunState } from '@tether/contract';
import { resultText, TetherClient } from '@tether/client';
import type { TenancyConfig } from '../../gateway/src/tenancy/config';
import { startTestGateway, type TestGateway } from '../helpers/gateway';

// Quotas, rate limits and admission over gRPC. The quota and rate logic sits above the
// sandbox provider, so these run on the process provider; disk and admission against the
// engine are in test/integration/docker/.
const gateways: TestGateway[] = [];
after(async () => {
  for (const g of gateways) await g.close();
});

async function gateway(tenancy: Partial<TenancyConfig>) {
  const t = await startTestGateway({
    tenancy: { default: {}, tenants: {}, admission: { concurrency: 4 }, ...tenancy },
  });
  gateways.push(t);
  return t;
}

const refused = (pattern: RegExp) => (e: unknown) => {
  const err = e as grpc.ServiceError;
  assert.equal(err.code, grpc.status.RESOURCE_EXHAUSTED, err.details);
  assert.match(err.details, pattern);
  return true;
};

const limits = { memoryMb: 256, cpuMillis: 500, diskMb: 64 };

test('each quota admits runs up to exactly its limit, refuses the next one naming it, and a delete frees the share', async () => {
  const kinds: [string, Partial<TenancyConfig['default']>, RegExp][] = [
    ['liveRuns', { liveRuns: 3 }, /liveRuns quota: limit 3, in use 3, this run asks 1/],
    ['memoryMb', { memoryMb: 768 }, /memoryMb quota: limit 768 MiB, in use 768 MiB, this run asks 256 MiB/],
    [
      'cpuMillis',
      { cpuMillis: 1500 },
      /cpuMillis quota: limit 1500 millicores, in use 1500 millicores, this run asks 500 millicores/,
    ],
    ['diskMb', { diskMb: 192 }, /diskMb quota: limit 192 MiB, in use 192 MiB, this run asks 64 MiB/],
  ];
  for (const [kind, quota, why] of kinds) {
    const t = await gateway({ default: quota });
    const runs = [];
    for (let i = 0; i < 3; i++) {
      const r = await t.alice.createRun({ conversationId: `${kind}-${i}`, limits });
      assert.equal(r.state, RunState.READY, `${kind}: run ${i} fits (${r.error})`);
      runs.push(r.runId);
    }
    await assert.rejects(t.alice.createRun({ limits }), refused(why), kind);
    assert.equal((await t.alice.listRuns()).length, 3, `${kind}: nothing half-created`);
    assert.equal((await t.bob.createRun({ limits })).state, RunState.READY, `${kind}: another tenant is not affected`);
    await t.alice.deleteRun(runs[0]);
    assert.equal((await t.alice.createRun({ limits })).state, RunState.READY, `${kind}: the delete freed a share`);
    await assert.rejects(t.alice.createRun({ limits }), refused(why), `${kind}: full again`);
  }
});

test('a per-tenant quota overrides the default for that tenant only', async () => {
  const t = await gateway({ default: { liveRuns: 1 }, tenants: { alice: { liveRuns: 2 } } });
  await t.alice.createRun({ limits });
  await t.alice.createRun({ limits });
  await assert.rejects(t.alice.createRun({ limits }), refused(/liveRuns quota: limit 2/));
  await t.bob.createRun({ limits });
  await assert.rejects(t.bob.createRun({ limits }), refused(/tenant bob is over its liveRuns quota: limit 1/));
});

test('a disk_mb with a host workspace is refused: a host directory is not sized', async () => {
  const t = await gateway({});
  await assert.rejects(
    t.alice.createRun({ workspace: '/tmp', limits: { diskMb: 64 } }),
    (e: grpc.ServiceError) => e.code === grpc.status.INVALID_ARGUMENT && /host workspace/.test(e.details),
  );
});

test("a CreateRun flood is rate limited with a retry hint; another tenant's creates are not", async () => {
  // Slow enough that no token comes back while the test runs.
  const t = await gateway({ default: { createRun: { perSecond: 0.05, burst: 2 } } });
  await t.alice.createRun({ limits });
  await t.alice.createRun({ limits });
  const err = await t.alice.createRun({ limits }).then(
    () => undefined,
    (e: grpc.ServiceError) => e,
  );
  assert.ok(err);
  refused(/createRun rate limit \(0\.05\/s, burst 2\); retry in \d+ ms/)(err);
  const hint = Number(err.metadata.get('retry-after-ms')[0]);
  assert.ok(hint > 1000 && hint <= 20000, `retry-after-ms ${hint}`);
  assert.ok(err.metadata.get('grpc-status-details-bin')[0], 'google.rpc.Status details are sent');
  assert.equal((await t.alice.listRuns()).length, 2, 'the refused create left nothing');
  assert.equal((await t.bob.createRun({ limits })).state, RunState.READY);
});

test('tenant A floods CallTool past its rate: A is refused with retry hints, B is never refused', async () => {
  const t = await gateway({ tenants: { alice: { callTool: { perSecond: 5, burst: 20 } } } });
  const a = await t.alice.createRun({ limits });
  const b = await t.bob.createRun({ limits });
  await t.alice.putFileMap(a.runId, { 'f.txt': 'a\n' });
  await t.bob.putFileMap(b.runId, { 'f.txt': 'b\n' });
  let aOk = 0;
  let aRefused = 0;
  const hints: number[] = [];
  const flood = Promise.all(
    Array.from({ length: 200 }, () =>
      t.alice.callTool(a.runId, 'read', { path: 'f.txt' }).then(
        () => aOk++,
        (e: grpc.ServiceError) => {
          assert.equal(e.code, grpc.status.RESOURCE_EXHAUSTED, e.details);
          hints.push(Number(e.metadata.get('retry-after-ms')[0]));
          aRefused++;
        },
      ),
    ),
  );
  // B has the default rate: one call every 25 ms while A floods.
  const bResults: string[] = [];
  for (let i = 0; i < 15; i++) {
    const out = await t.bob.callTool(b.runId, 'read', { path: 'f.txt' });
    bResults.push(resultText(out.result));
    await new Promise((r) => setTimeout(r, 25));
  }
  await flood;
  assert.ok(aRefused >= 100, `A: ${aOk} answered, ${aRefused} refused`);
  assert.ok(aOk >= 20, `A got at least its burst: ${aOk}`);
  assert.ok(
    hints.every((h) => h >= 1 && h <= 200),
    `hints within one token's time at 5/s: ${[...new Set(hints)].join(',')}`,
  );
  assert.equal(bResults.length, 15);
  assert.ok(
    bResults.every((r) => /b/.test(r)),
    'every B call answered',
  );
});

test("a tenant's calls past callsInFlight wait in its own line, past queuedCalls are refused; another tenant's are not", async () => {
  const t = await gateway({ tenants: { alice: { callsInFlight: 2, queuedCalls: 3 } } });
  const a = await t.alice.createRun({ limits });
  const b = await t.bob.createRun({ limits });
  await t.alice.putFileMap(a.runId, { 'f.txt': 'a\n' });
  await t.bob.putFileMap(b.runId, { 'f.txt': 'b\n' });
  const outcomes = await Promise.allSettled(
    Array.from({ length: 40 }, () => t.alice.callTool(a.runId, 'read', { path: 'f.txt' })),
  );
  const bOut = await Promise.all(Array.from({ length: 10 }, () => t.bob.callTool(b.runId, 'read', { path: 'f.txt' })));
  const answered = outcomes.filter((o) => o.status === 'fulfilled');
  const refusedCalls = outcomes.filter((o) => o.status === 'rejected').map((o) => o.reason as grpc.ServiceError);
  assert.ok(answered.length >= 5, `two in flight and three waiting are answered: ${answered.length}`);
  assert.ok(refusedCalls.length > 0, 'a burst of 40 overflows a line of 3');
  for (const e of refusedCalls) {
    refused(/tenant alice has 2 calls in flight and 3 waiting \(callsInFlight, queuedCalls\); retry later/)(e);
    assert.equal(e.metadata.get('retry-after-ms')[0], '100');
  }
  assert.ok(
    bOut.every((o) => /b/.test(resultText(o.result))),
    "B's 10 parallel calls are all answered",
  );
  // The slots are all given back: the next calls are answered.
  for (let i = 0; i < 5; i++) await t.alice.callTool(a.runId, 'read', { path: 'f.txt' });
});

test('calls past callsInFlight wait their turn; one cancelled while it waits leaves the line and never runs', async (ctx) => {
  const t = await gateway({ tenants: { alice: { callsInFlight: 1, queuedCalls: 4 } } });
  const run = await t.alice.createRun({ limits, features: { eval: true } });
  if (!(await t.alice.listTools(run.runId)).some((x) => x.name === 'eval'))
    return ctx.skip('this build has no eval tool');
  const slots = t.gateway.tenancy.callSlots('alice');
  const until = async (what: string, ok: () => boolean) => {
    for (let i = 0; i < 500 && !ok(); i++) await new Promise((r) => setTimeout(r, 10));
    assert.ok(ok(), what);
  };
  const evalCall = (code: string, signal?: AbortSignal) =>
    t.alice.callTool(run.runId, 'eval', { code, description: 'a call for the slot test' }, signal ? { signal } : {});
  const first = evalCall('import time\ntime.sleep(1)\nprint("first done")');
  await until('the first call holds the one slot', () => slots.active === 1);
  const second = evalCall('print("second done")');
  const abort = new AbortController();
  const third = evalCall('open("third.txt", "w").write("ran")', abort.signal);
  await until('two calls wait in line', () => slots.waiting === 2);
  abort.abort('not needed any more');
  const cancelled = await third;
  assert.ok(cancelled.result.isError, 'the cancelled call is answered as cancelled');
  assert.match(resultText(cancelled.result), /cancel/);
  assert.equal(slots.waiting, 1, 'it left the line');
  assert.match(resultText((await first).result), /first done/);
  assert.match(resultText((await second).result), /second done/);
  const read = await t.alice.callTool(run.runId, 'read', { path: 'third.txt' });
  assert.ok(read.result.isError, 'the cancelled call never ran');
  await until('every slot is given back', () => slots.active === 0 && slots.waiting === 0);
});

test('maxConcurrentStreams: CallTool streams past it on one connection wait in the client, then are all answered', async (ctx) => {
  const t = await startTestGateway({
    maxConcurrentStreams: 2,
    tenancy: { default: {}, tenants: {}, admission: { concurrency: 4 } },
  });
  gateways.push(t);
  const run = await t.alice.createRun({ limits, features: { eval: true } });
  if (!(await t.alice.listTools(run.runId)).some((x) => x.name === 'eval'))
    return ctx.skip('this build has no eval tool');
  const slots = t.gateway.tenancy.callSlots('alice');
  let most = 0;
  const watch = setInterval(() => (most = Math.max(most, slots.active)), 5);
  // One CallTool stream per call (a shared Calls stream is one stream, whatever it carries).
  const ownStreams = new TetherClient(t.gateway.address, 'token-alice', { multiplex: false });
  const outs = await Promise.all(
    [1, 2, 3, 4].map((i) =>
      ownStreams.callTool(run.runId, 'eval', {
        code: `import time\ntime.sleep(0.5)\nprint("call ${i} done")`,
        description: 'a call for the stream limit test',
      }),
    ),
  );
  clearInterval(watch);
  ownStreams.close();
  outs.forEach((o, i) => assert.match(resultText(o.result), new RegExp(`call ${i + 1} done`)));
  assert.equal(most, 2, 'never more than two calls of the one connection at the gateway at once');
});
