import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import { GatewayError } from '../../../gateway/src/errors';
import { assembleRuns } from '../../../gateway/src/server';
import { RunnerGoneError } from '../../../gateway/src/runs/RunnerClient';
import { SandboxPreconditionError, SandboxUnreachableError } from '../../../gateway/src/sandbox/provider';
import { InitializeRequest, ShutdownRequest } from '../../../protocol/src/run';
import { CallToolRequest } from '../../../protocol/src/tools';
import { answersInitialize, FakeProvider, runSpec, testConfig, TOOLS, until, type FakeSandbox } from './fakeSandbox';

const code = (c: status) => (err: unknown) => err instanceof GatewayError && err.code === c;
const noHooks = {
  progress: () => undefined,
  ask: async () => ({ kind: 'unavailable' as const, reason: 'none' }),
  bridge: async () => ({ content: [], isError: true }),
};

async function manager(runs: Parameters<typeof testConfig>[0] = {}, provider = new FakeProvider()) {
  const m = assembleRuns(testConfig(runs), provider);
  return { m, provider };
}

test('create: STARTING until the runner answers initialize, then READY with its tools', async () => {
  const { m, provider } = await manager();
  const run = await m.lifecycle.create('alice', runSpec({ conversationId: 'c1', labels: { team: 'x' } }));
  assert.equal(run.state, 'READY');
  assert.equal(run.error, '');
  assert.deepEqual(
    m.registry.ready('alice', run.runId).tools.map((t) => t.name),
    TOOLS.map((t) => t.name),
  );
  const sb = provider.sandboxes.get(run.sandbox!.id)!;
  assert.equal(sb.labels['dev.tether.tenant'], 'alice');
  assert.equal(sb.labels.team, 'x');
  await m.close(false);
});

test("another tenant's run does not exist for the caller", async () => {
  const { m } = await manager();
  const run = await m.lifecycle.create('alice', runSpec());
  assert.throws(() => m.registry.get('bob', run.runId), code(status.NOT_FOUND));
  assert.throws(() => m.registry.ready('bob', run.runId), code(status.NOT_FOUND));
  await assert.rejects(m.lifecycle.delete('bob', run.runId), code(status.NOT_FOUND));
  assert.deepEqual(m.registry.list('bob'), []);
  assert.deepEqual(
    m.registry.list('alice').map((r) => r.runId),
    [run.runId],
  );
  assert.equal(m.registry.get('alice', run.runId).state, 'READY', 'untouched by the other tenant');
  await m.close(false);
});

test('a tenant may hold at most maxPerTenant live runs; failed ones do not count', async () => {
  const { m, provider } = await manager({ maxPerTenant: 1 });
  const first = await m.lifecycle.create('alice', runSpec());
  await assert.rejects(
    m.lifecycle.create('alice', runSpec()),
    (e) => code(status.RESOURCE_EXHAUSTED)(e) && /liveRuns quota: limit 1, in use 1/.test((e as Error).message),
  );
  assert.equal((await m.lifecycle.create('bob', runSpec())).state, 'READY', 'the limit is per tenant');
  provider.sandboxes.get(first.sandbox!.id)!.exit();
  await until(() => first.state === 'FAILED');
  assert.equal((await m.lifecycle.create('alice', runSpec())).state, 'READY');
  await m.close(false);
});

test('a runner that never answers initialize: FAILED with the timeout, sandbox removed', async () => {
  const provider = new FakeProvider((conn) =>
    conn.onRequest(InitializeRequest.type, () => new Promise(() => undefined)),
  );
  const { m } = await manager({ startTimeoutSeconds: 0.1 }, provider);
  const run = await m.lifecycle.create('alice', runSpec());
  assert.equal(run.state, 'FAILED');
  assert.equal(run.error, 'could not start the run: runner did not answer within 0.1s');
  assert.equal(provider.removed.length, 1);
  assert.equal(run.sandbox, undefined, 'its workspace went with it');
  assert.throws(
    () => m.registry.ready('alice', run.runId),
    (e) => code(status.FAILED_PRECONDITION)(e) && /has failed: could not start/.test((e as Error).message),
  );
  await m.close(false);
});

test('the runner dies: FAILED with the exit reason, pending calls end at once, the workspace stays readable', async () => {
  let called!: () => void;
  const calledP = new Promise<void>((r) => (called = r));
  const provider = new FakeProvider((conn, sb) => {
    answersInitialize(conn, sb);
    conn.onRequest(CallToolRequest.type, () => {
      called();
      return new Promise(() => undefined);
    });
  });
  const { m } = await manager({}, provider);
  const run = await m.lifecycle.create('alice', runSpec());
  const ready = m.registry.ready('alice', run.runId);
  const pending = ready.runner.callTool('echo', {}, { maxTier: 'read' }, noHooks, new AbortController().signal);
  await calledP;
  assert.equal(ready.runner.busy, true);
  (run.sandbox as FakeSandbox).exit({ reason: 'killed by SIGKILL', oomKilled: true, exitCode: 137 });
  await assert.rejects(pending, RunnerGoneError);
  await until(() => run.state === 'FAILED' && /OOM/.test(run.error));
  // The connection closing first gives a provisional reason; the exit's reason replaces it.
  assert.equal(run.error, 'the run ran out of memory and its sandbox was killed (OOM)');
  assert.equal(run.runner, undefined, 'a failed run holds no runner');
  assert.ok(run.sandbox, 'but keeps its sandbox until DeleteRun');
  assert.throws(() => m.registry.ready('alice', run.runId), code(status.FAILED_PRECONDITION));
  await m.close(false);
});

test('a runner that stops answering fails the run before its sandbox is reported gone', async () => {
  const { m } = await manager();
  const run = await m.lifecycle.create('alice', runSpec());
  const sb = run.sandbox as FakeSandbox;
  sb.stdout.end();
  await until(() => run.state === 'FAILED');
  assert.match(run.error, /^the runner stopped answering: /);
  sb.exit({ reason: 'exited with code 3', exitCode: 3 });
  await until(() => run.error === "the run's sandbox ended: exited with code 3");
  await m.close(false);
});

test('delete: the runner is asked to shut down, the sandbox removed, the run forgotten', async () => {
  let shutdowns = 0;
  const provider = new FakeProvider((conn) => {
    conn.onRequest(InitializeRequest.type, () => ({ version: 'fake', tools: TOOLS }));
    conn.onRequest(ShutdownRequest.type, () => {
      shutdowns++;
      return {};
    });
  });
  const { m } = await manager({}, provider);
  const run = await m.lifecycle.create('alice', runSpec());
  const id = run.sandbox!.id;
  await m.lifecycle.delete('alice', run.runId);
  assert.equal(run.state, 'STOPPED');
  assert.equal(run.error, '', 'a plain delete has no reason');
  assert.equal(shutdowns, 1);
  assert.deepEqual(provider.removed, [id]);
  assert.throws(() => m.registry.get('alice', run.runId), code(status.NOT_FOUND));
  await m.close(false);
});

test('shutdown is bounded: a runner that ignores it does not hold up delete', async () => {
  const provider = new FakeProvider((conn) => {
    conn.onRequest(InitializeRequest.type, () => ({ version: 'fake', tools: TOOLS }));
    conn.onRequest(ShutdownRequest.type, () => new Promise(() => undefined));
  });
  const { m } = await manager({}, provider);
  const run = await m.lifecycle.create('alice', runSpec());
  const t0 = Date.now();
  await m.lifecycle.delete('alice', run.runId);
  assert.ok(Date.now() - t0 < 2500, `delete took ${Date.now() - t0} ms`);
  await m.close(false);
});

test('sweep: idle runs and runs past their lifetime are STOPPED with the reason; busy ones are not idle', async () => {
  const { m } = await manager({ idleTimeoutSeconds: 60, maxLifetimeSeconds: 3600 });
  const idle = await m.lifecycle.create('alice', runSpec());
  await m.lifecycle.sweep(Date.now() + 30_000);
  assert.equal(idle.state, 'READY');
  await m.lifecycle.sweep(Date.now() + 61_000);
  assert.equal(idle.state, 'STOPPED');
  assert.equal(idle.error, 'stopped: idle for more than 60s');
  assert.throws(
    () => m.registry.ready('alice', idle.runId),
    (e) => code(status.FAILED_PRECONDITION)(e) && /is stopped/.test((e as Error).message),
  );

  const old = await m.lifecycle.create('alice', runSpec());
  await m.lifecycle.sweep(old.createdAt.getTime() + 3601_000);
  assert.equal(old.state, 'STOPPED');
  assert.equal(old.error, 'stopped: reached the maximum lifetime of 3600s');
  await m.close(false);
});

test('after a restart, live runs are re-attached with their tenant and spec; dead ones removed', async () => {
  const provider = new FakeProvider();
  const first = assembleRuns(testConfig(), provider);
  const kept = await first.lifecycle.create('alice', runSpec({ conversationId: 'conv-7', labels: { k: 'v' } }));
  const dead = await first.lifecycle.create('alice', runSpec());
  await first.close(true);
  const deadSandbox = dead.sandbox as FakeSandbox;
  deadSandbox.exit();

  const second = assembleRuns(testConfig(), provider);
  assert.deepEqual(await second.recovery.recover(), { recovered: 1, removed: 1, left: 0, paused: 0 });
  const again = second.registry.get('alice', kept.runId);
  assert.equal(again.state, 'READY');
  assert.equal(again.spec.conversationId, 'conv-7');
  assert.deepEqual(again.spec.labels, { k: 'v' });
  assert.equal(again.createdAt.getTime(), kept.createdAt.getTime());
  assert.throws(() => second.registry.get('bob', kept.runId), code(status.NOT_FOUND));
  assert.throws(() => second.registry.get('alice', dead.runId), code(status.NOT_FOUND));
  assert.ok(provider.removed.includes(deadSandbox.id));
  assert.deepEqual(
    second.registry.ready('alice', kept.runId).tools.map((t) => t.name),
    TOOLS.map((t) => t.name),
  );
  await second.close(false);
});

test('after a restart, a live run this gateway cannot reach is left in place, not removed', async () => {
  const provider = new FakeProvider();
  const first = assembleRuns(testConfig(), provider);
  const run = await first.lifecycle.create('alice', runSpec());
  await first.close(true);
  provider.attach = async () => {
    throw new SandboxUnreachableError('started with another state directory');
  };
  const second = assembleRuns(testConfig(), provider);
  assert.deepEqual(await second.recovery.recover(), { recovered: 0, removed: 0, left: 1, paused: 0 });
  assert.deepEqual(provider.removed, []);
  assert.throws(() => second.registry.get('alice', run.runId), code(status.NOT_FOUND));
  await second.close(false);
  assert.ok(provider.sandboxes.has(run.sandbox!.id), 'closing the gateway does not touch it either');
});

test('a sandbox the deployment cannot serve: CreateRun is FAILED_PRECONDITION and no run is left; quota freed', async () => {
  const provider = new FakeProvider();
  const create = provider.create.bind(provider);
  let refuse = true;
  provider.create = async (spec) => {
    if (refuse) throw new SandboxPreconditionError('pod p has no address');
    return create(spec);
  };
  const { m } = await manager({ maxPerTenant: 1 }, provider);
  await assert.rejects(
    m.lifecycle.create('alice', runSpec()),
    (e) =>
      code(status.FAILED_PRECONDITION)(e) && /could not start the run: pod p has no address/.test((e as Error).message),
  );
  assert.deepEqual(m.registry.list('alice'), []);
  // The refused run held no slot.
  refuse = false;
  assert.equal((await m.lifecycle.create('alice', runSpec())).state, 'READY');
  await m.close(false);
});

test('egress on a provider that cannot carry it: FAILED_PRECONDITION with its reason, nothing started', async () => {
  const { m, provider } = await manager();
  await assert.rejects(
    m.lifecycle.create('alice', runSpec({ egress: { allow: ['pypi.org'] } })),
    (e) =>
      code(status.FAILED_PRECONDITION)(e) &&
      (e as Error).message === 'egress is not available: the fake provider cannot carry egress',
  );
  assert.deepEqual(m.registry.list('alice'), []);
  assert.equal(provider.sandboxes.size, 0);
  await m.close(false);
});

test('a provider whose sandboxes other replicas share: idleness is not swept, the lifetime still is', async () => {
  const provider = new FakeProvider();
  provider.capabilities = { ...provider.capabilities, sharedState: true };
  const { m } = await manager({ idleTimeoutSeconds: 60, maxLifetimeSeconds: 3600 }, provider);
  const run = await m.lifecycle.create('alice', runSpec());
  await m.lifecycle.sweep(Date.now() + 61_000);
  assert.equal(run.state, 'READY', 'this replica does not see the calls made through the others');
  await m.lifecycle.sweep(run.createdAt.getTime() + 3601_000);
  assert.equal(run.error, 'stopped: reached the maximum lifetime of 3600s');
  await m.close(false);
});
