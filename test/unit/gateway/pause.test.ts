import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { status } from '@grpc/grpc-js';
import { GatewayError } from '../../../gateway/src/errors';
import { Metrics } from '../../../gateway/src/observability/metrics';
import { Telemetry } from '../../../gateway/src/observability/Telemetry';
import { PausedStore } from '../../../gateway/src/runs/PausedStore';
import { assembleRuns } from '../../../gateway/src/server';
import { CommandRequest } from '../../../protocol/src/run';
import { CallToolRequest } from '../../../protocol/src/tools';
import { FakeProvider, runSpec, testConfig, type FakeSandbox } from './fakeSandbox';

const noHooks = {
  progress: () => undefined,
  ask: async () => ({ kind: 'unavailable' as const, reason: 'none' }),
  bridge: async () => ({ content: [], isError: true }),
};
const code = (c: status, text?: RegExp) => (err: unknown) =>
  err instanceof GatewayError && err.code === c && (!text || text.test(err.message));

/** Runs on a provider that pauses, with their own state directory. */
function gateway(
  runs: Parameters<typeof testConfig>[0] = {},
  provider = new FakeProvider().pausable(),
  stateDir?: string,
) {
  const config = { ...testConfig(runs), stateDir: stateDir ?? mkdtempSync(path.join(os.tmpdir(), 'tether-pause-')) };
  const metrics = new Metrics({ defaults: false });
  return { m: assembleRuns(config, provider, new Telemetry(metrics)), provider, config, metrics };
}

test('pause keeps the workspace and lets go of the sandbox; a call resumes it on the same workspace, once', async () => {
  const { m, provider, config, metrics } = gateway();
  const run = await m.lifecycle.create('alice', runSpec());
  const first = run.sandbox as FakeSandbox;
  await m.pauses.pause('alice', run.runId);
  assert.equal(run.state, 'PAUSED');
  assert.equal(provider.sandboxes.size, 0, 'no sandbox is left');
  assert.deepEqual(provider.removed, [], 'nothing was removed: the workspace is kept');
  assert.equal(run.pause?.reason, 'requested');
  assert.equal(run.pause?.stateBytes, 100);
  assert.deepEqual(readdirSync(path.join(config.stateDir, 'paused', 'unit')), [`${run.runId}.json`]);
  assert.throws(() => m.registry.ready('alice', run.runId), code(status.FAILED_PRECONDITION, /is paused/));
  // The quota: a paused run holds disk, not memory or a live slot.
  assert.deepEqual(m.registry.reservedBy('alice'), {
    liveRuns: 0,
    memoryMb: 0,
    cpuMillis: 0,
    diskMb: run.spec.limits.diskMb,
  });

  const ready = await m.pauses.whenReady('alice', run.runId);
  assert.equal(run.state, 'READY');
  assert.notEqual(ready.sandbox.id, first.id);
  assert.equal(provider.madeOn.get(ready.sandbox.id), first.keepable, 'made on the kept workspace');
  assert.equal(ready.takeResumeNotice(), 'resumed: x is back');
  assert.equal(ready.takeResumeNotice(), undefined, 'only the first result carries it');
  assert.ok(run.pause?.resumedAt);
  assert.deepEqual(readdirSync(path.join(config.stateDir, 'paused', 'unit')), [], 'the record goes once READY');
  const text = await metrics.text();
  for (const move of ['pause', 'resume'])
    assert.match(
      text,
      new RegExp(`tether_run_pause_duration_seconds_count\\{move="${move}",depth="portable",outcome="ok"\\} 1`),
    );
  assert.match(text, /tether_run_pause_state_bytes_sum\{depth="portable"\} 100/);
  await m.close(false);
});

test('concurrent calls for a paused run share one resume; pausing a paused run returns it', async () => {
  const { m, provider } = gateway();
  const run = await m.lifecycle.create('alice', runSpec());
  await Promise.all([m.pauses.pause('alice', run.runId), m.pauses.pause('alice', run.runId)]);
  assert.equal(run.state, 'PAUSED');
  const made = provider.madeOn.size;
  await Promise.all([1, 2, 3].map(() => m.pauses.whenReady('alice', run.runId)));
  assert.equal(provider.madeOn.size, made + 1, 'one sandbox for three callers');
  await m.close(false);
});

test('refusals: another tenant, a provider that cannot pause, a call in flight, the paused limit', async () => {
  const provider = new FakeProvider().pausable();
  const pausing = provider.script;
  provider.script = (conn, sb) => {
    pausing(conn, sb);
    conn.onRequest(CallToolRequest.type, () => new Promise(() => undefined));
  };
  const { m } = gateway({ maxPausedPerTenant: 1 }, provider);
  const a = await m.lifecycle.create('alice', runSpec());
  await assert.rejects(m.pauses.pause('bob', a.runId), code(status.NOT_FOUND));
  await assert.rejects(m.pauses.resume('bob', a.runId), code(status.NOT_FOUND));
  await m.pauses.pause('alice', a.runId);
  const b = await m.lifecycle.create('alice', runSpec());
  await assert.rejects(m.pauses.pause('alice', b.runId), code(status.RESOURCE_EXHAUSTED, /1 paused runs/));
  const call = m.registry
    .ready('alice', b.runId)
    .runner.callTool('echo', {}, { maxTier: 'exec' }, noHooks, new AbortController().signal);
  call.catch(() => undefined);
  await assert.rejects(m.pauses.pause('alice', b.runId), code(status.FAILED_PRECONDITION, /a call is in flight/));
  assert.equal(b.state, 'READY');
  await m.close(false);

  const plain = gateway({}, new FakeProvider());
  const c = await plain.m.lifecycle.create('alice', runSpec());
  await assert.rejects(
    plain.m.pauses.pause('alice', c.runId),
    code(status.FAILED_PRECONDITION, /fake provider cannot pause runs/),
  );
  assert.equal(c.state, 'READY');
  await plain.m.close(false);
});

test('a suspend that fails leaves the run READY on its sandbox; nothing is recorded', async () => {
  const provider = new FakeProvider().pausable();
  const pausing = provider.script;
  provider.script = (conn, sb) => {
    pausing(conn, sb);
    conn.onRequest(CommandRequest.type, () => {
      throw new Error('disk full');
    });
  };
  const { m, config } = gateway({}, provider);
  const run = await m.lifecycle.create('alice', runSpec());
  await assert.rejects(m.pauses.pause('alice', run.runId), code(status.FAILED_PRECONDITION, /disk full/));
  assert.equal(run.state, 'READY');
  assert.equal(provider.sandboxes.size, 1);
  assert.deepEqual(
    readdirSync(config.stateDir).includes('paused') ? readdirSync(path.join(config.stateDir, 'paused', 'unit')) : [],
    [],
  );
  await m.close(false);
});

test('a resume that fails leaves the run PAUSED on its workspace, to try again', async () => {
  const { m, provider } = gateway();
  const run = await m.lifecycle.create('alice', runSpec());
  await m.pauses.pause('alice', run.runId);
  const kept = run.pausedWorkspace;
  const working = provider.script;
  provider.script = (conn, sb) => {
    working(conn, sb);
    conn.onRequest(CommandRequest.type, () => {
      throw new Error('restore blew up');
    });
  };
  await assert.rejects(
    m.pauses.whenReady('alice', run.runId),
    code(status.UNAVAILABLE, /stays paused\): .*restore blew up/),
  );
  assert.equal(run.state, 'PAUSED');
  assert.equal(run.pausedWorkspace, kept);
  assert.equal(provider.sandboxes.size, 0, 'the sandbox it made is gone, the workspace kept');
  assert.ok(provider.workspaces.has(kept!));
  provider.script = working;
  await m.pauses.whenReady('alice', run.runId);
  assert.equal(run.state, 'READY');
  await m.close(false);
});

test('a restarted gateway finds paused runs; a pause it did not see finish is completed', async () => {
  const provider = new FakeProvider().pausable();
  const first = gateway({}, provider);
  const done = await first.m.lifecycle.create('alice', runSpec({ conversationId: 'done' }));
  const half = await first.m.lifecycle.create('alice', runSpec({ conversationId: 'half' }));
  await first.m.pauses.pause('alice', done.runId);
  // `half`: its record written, its sandbox never removed (the gateway died in between).
  const store = new PausedStore(path.join(first.config.stateDir, 'paused', 'unit'));
  const halfSandbox = half.sandbox as FakeSandbox;
  await store.write(
    half.runId,
    PausedStore.recordOf(half, halfSandbox.keepable!, {
      depth: 'portable',
      pausedAt: new Date(),
      reason: 'idle',
      stateBytes: 1,
      notKept: [],
    }),
  );
  await first.m.close(true);

  const second = gateway({}, provider, first.config.stateDir);
  assert.deepEqual(await second.m.recovery.recover(), { recovered: 0, removed: 0, left: 0, paused: 2 });
  assert.equal(second.m.registry.get('alice', done.runId).state, 'PAUSED');
  assert.equal(second.m.registry.get('alice', half.runId).state, 'PAUSED');
  assert.equal(second.m.registry.get('alice', half.runId).spec.conversationId, 'half');
  assert.equal(provider.sandboxes.size, 0, "the half-paused run's sandbox was let go, its workspace kept");
  assert.throws(() => second.m.registry.get('bob', done.runId), code(status.NOT_FOUND));
  const back = await second.m.pauses.whenReady('alice', half.runId);
  assert.equal(provider.madeOn.get(back.sandbox.id), halfSandbox.keepable);
  await second.m.close(false);
});

test('idle runs are paused before the idle stop; paused runs past retention are stopped and their workspace dropped', async () => {
  const { m, provider } = gateway({ idlePauseSeconds: 10, idleTimeoutSeconds: 60, pausedRetentionSeconds: 100 });
  const run = await m.lifecycle.create('alice', runSpec());
  const now = Date.now();
  await m.pauses.sweep(now + 5_000);
  assert.equal(run.state, 'READY', 'not idle long enough');
  await m.pauses.sweep(now + 11_000);
  assert.equal(run.state, 'PAUSED');
  assert.equal(run.pause?.reason, 'idle');
  const kept = run.pausedWorkspace!;
  await m.pauses.sweep(now + 50_000);
  assert.equal(run.state, 'PAUSED');
  await m.pauses.sweep(Date.now() + 101_000);
  assert.equal(run.state, 'STOPPED');
  assert.match(run.error, /paused for more than 100s/);
  assert.deepEqual(provider.dropped, [kept]);
  await m.close(false);
});

test('DeleteRun of a paused run drops its workspace and its record', async () => {
  const { m, provider, config } = gateway();
  const run = await m.lifecycle.create('alice', runSpec());
  await m.pauses.pause('alice', run.runId);
  const kept = run.pausedWorkspace!;
  await m.lifecycle.delete('alice', run.runId);
  assert.deepEqual(provider.dropped, [kept]);
  assert.deepEqual(readdirSync(path.join(config.stateDir, 'paused', 'unit')), []);
  assert.throws(() => m.registry.get('alice', run.runId), code(status.NOT_FOUND));
  await m.close(false);
});

test('fork: each fork starts on its own copy with the state; the parent goes on; all or nothing against the quota', async () => {
  const { m, provider } = gateway();
  const parent = await m.lifecycle.create('alice', runSpec({ limits: { memoryMb: 512 } }));
  const forks = await m.pauses.fork('alice', parent.runId, 3);
  assert.equal(forks.length, 3);
  assert.equal(parent.state, 'READY', 'the parent goes on');
  const handles = new Set<string>();
  for (const f of forks) {
    assert.equal(f.state, 'READY', f.error);
    assert.equal(f.spec.forkedFrom, parent.runId);
    const ready = m.registry.ready('alice', f.runId);
    const on = provider.madeOn.get(ready.sandbox.id)!;
    handles.add(on);
    assert.deepEqual(provider.workspaces.get(on)?.state, { x: 42 }, "the parent's state, copied");
    assert.equal(ready.takeResumeNotice(), 'resumed: x is back');
  }
  assert.equal(handles.size, 3, 'three copies, none shared');
  assert.ok(!handles.has((parent.sandbox as FakeSandbox).keepable!));
  await assert.rejects(m.pauses.fork('bob', parent.runId, 1), code(status.NOT_FOUND));
  await assert.rejects(m.pauses.fork('alice', parent.runId, 11), code(status.INVALID_ARGUMENT, /1 to 10/));
  await m.close(false);

  // A tenant whose memory quota holds two more runs: a fork of three is refused whole.
  const tight = gateway();
  const small = { ...tight.config, tenancy: { ...tight.config.tenancy, default: { memoryMb: 1536 } } };
  const q = assembleRuns(small, tight.provider);
  const p = await q.lifecycle.create('alice', runSpec({ limits: { memoryMb: 512 } }));
  const before = q.registry.list('alice').length;
  await assert.rejects(q.pauses.fork('alice', p.runId, 3), code(status.RESOURCE_EXHAUSTED));
  assert.equal(q.registry.list('alice').length, before, 'no fork was made');
  assert.equal((await q.pauses.fork('alice', p.runId, 2)).length, 2);
  await q.close(false);
});

test('fork of a paused run copies its kept workspace and leaves it paused', async () => {
  const { m, provider } = gateway();
  const parent = await m.lifecycle.create('alice', runSpec());
  await m.pauses.pause('alice', parent.runId);
  const [f] = await m.pauses.fork('alice', parent.runId, 1);
  assert.equal(f!.state, 'READY', f!.error);
  assert.equal(parent.state, 'PAUSED');
  assert.notEqual(provider.madeOn.get(f!.sandbox!.id), parent.pausedWorkspace);
  await m.close(false);
});
