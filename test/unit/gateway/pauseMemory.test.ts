import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Metrics } from '../../../gateway/src/observability/metrics';
import { Telemetry } from '../../../gateway/src/observability/Telemetry';
import { PausedStore } from '../../../gateway/src/runs/PausedStore';
import { assembleRuns } from '../../../gateway/src/server';
import { QuiesceRequest } from '../../../protocol/src/transport';
import { FakeProvider, runSpec, testConfig, type FakeSandbox } from './fakeSandbox';

/** Runs on a provider that takes memory checkpoints, with their own state directory. */
function gateway(provider = new FakeProvider().memoryPausable(), stateDir?: string) {
  const config = { ...testConfig(), stateDir: stateDir ?? mkdtempSync(path.join(os.tmpdir(), 'tether-pause-mem-')) };
  const metrics = new Metrics({ defaults: false });
  return { m: assembleRuns(config, provider, new Telemetry(metrics)), provider, config, metrics };
}
const records = (stateDir: string) => readdirSync(path.join(stateDir, 'paused', 'unit'));

test('a memory pause quiesces the runner and stops the sandbox with its checkpoint; a call restores that same sandbox', async () => {
  const { m, provider, config, metrics } = gateway();
  const run = await m.lifecycle.create('alice', runSpec());
  const first = run.sandbox as FakeSandbox;
  first.memory.x = 42;
  await m.pauses.pause('alice', run.runId);
  assert.equal(run.state, 'PAUSED');
  assert.equal(run.pause?.depth, 'memory');
  assert.equal(first.quiesced, true, 'the runner closed its connections before the checkpoint');
  assert.equal(first.running, false, 'no process of the run is left');
  assert.equal(run.pause?.checkpoint?.sandbox, first.id);
  assert.ok(run.pause?.checkpoint?.name, 'the record names a checkpoint written whole');
  assert.equal(
    (await new PausedStore(path.join(config.stateDir, 'paused', 'unit')).read(run.runId))?.pause.checkpoint?.name,
    run.pause?.checkpoint?.name,
  );
  assert.equal(provider.workspaces.get(first.keepable!)?.state, undefined, 'nothing was serialized');
  assert.deepEqual(m.registry.reservedBy('alice').memoryMb, 0, 'a paused run holds no memory');

  const ready = await m.pauses.whenReady('alice', run.runId);
  assert.equal(run.state, 'READY');
  assert.equal(ready.sandbox.id, first.id, 'the same sandbox, started from its checkpoint');
  assert.deepEqual((ready.sandbox as FakeSandbox).memory, { x: 42 }, 'what its processes held is back');
  assert.match(ready.takeResumeNotice() ?? '', /memory depth.*all kept/);
  assert.deepEqual(records(config.stateDir), [], 'the record goes once READY');
  assert.equal(provider.checkpoints.get(first.id)?.size, 0, 'the restored checkpoint is removed');
  const text = await metrics.text();
  for (const move of ['pause', 'resume'])
    assert.match(
      text,
      new RegExp(`tether_run_pause_duration_seconds_count\\{move="${move}",depth="memory",outcome="ok"\\} 1`),
    );

  // Again: a restored sandbox pauses at memory depth as well.
  (ready.sandbox as FakeSandbox).memory.y = 7;
  await m.pauses.pause('alice', run.runId);
  assert.equal(run.pause?.depth, 'memory');
  const again = await m.pauses.whenReady('alice', run.runId);
  assert.deepEqual((again.sandbox as FakeSandbox).memory, { x: 42, y: 7 });
  await m.close(false);
});

test('a checkpoint that fails wakes the runner and pauses at portable depth, saying why', async () => {
  const { m, provider } = gateway(new FakeProvider().memoryPausable({ checkpoint: 'runsc: checkpoint refused' }));
  const run = await m.lifecycle.create('alice', runSpec());
  const first = run.sandbox as FakeSandbox;
  await m.pauses.pause('alice', run.runId);
  assert.equal(run.state, 'PAUSED');
  assert.equal(run.pause?.depth, 'portable', 'Run.pause reports the depth used');
  assert.match(run.pause?.notKept[0] ?? '', /memory checkpoint failed \(runsc: checkpoint refused\)/);
  assert.equal(run.pause?.checkpoint, undefined);
  assert.deepEqual(provider.workspaces.get(first.keepable!)?.state, { x: 42 }, 'the portable state was written');
  assert.equal(first.quiesced, false, 'the runner was woken before the portable suspend');
  const ready = await m.pauses.whenReady('alice', run.runId);
  assert.notEqual(ready.sandbox.id, first.id, 'a portable resume starts a new sandbox');
  assert.equal(ready.takeResumeNotice(), 'resumed: x is back');
  await m.close(false);
});

test('a checkpoint that fails and ends the sandbox: paused on its files at portable depth, saying the memory is lost', async () => {
  const { m, provider } = gateway(new FakeProvider().memoryPausable({ checkpoint: 'runsc: refused', ends: true }));
  const run = await m.lifecycle.create('alice', runSpec());
  const first = run.sandbox as FakeSandbox;
  await m.pauses.pause('alice', run.runId);
  assert.equal(run.state, 'PAUSED');
  assert.equal(run.pause?.depth, 'portable');
  assert.match(
    run.pause?.notKept[0] ?? '',
    /memory checkpoint failed \(runsc: refused\) and the sandbox ended with it/,
  );
  assert.equal(provider.sandboxes.has(first.id), false, 'the dead sandbox is removed, its workspace kept');
  const ready = await m.pauses.whenReady('alice', run.runId);
  assert.equal(provider.madeOn.get(ready.sandbox.id), first.keepable);
  await m.close(false);
});

test('a checkpoint that fails and a sandbox that ends after its wake: paused on its files, never failed by that end', async () => {
  const { m } = gateway(new FakeProvider().memoryPausable({ checkpoint: 'engine: refused', wakeEnds: true }));
  const run = await m.lifecycle.create('alice', runSpec());
  await m.pauses.pause('alice', run.runId);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(run.state, 'PAUSED', run.error);
  assert.match(
    run.pause?.notKept[0] ?? '',
    /memory checkpoint failed \(engine: refused\) and the sandbox ended with it/,
  );
  const ready = await m.pauses.whenReady('alice', run.runId);
  assert.equal((ready.sandbox as FakeSandbox).running, true);
  await m.close(false);
});

test('a restore that fails resumes from the workspace at portable depth, saying the memory was lost', async () => {
  const { m, provider } = gateway(new FakeProvider().memoryPausable({ restore: 'checkpoint image damaged' }));
  const run = await m.lifecycle.create('alice', runSpec());
  const first = run.sandbox as FakeSandbox;
  await m.pauses.pause('alice', run.runId);
  assert.equal(run.pause?.depth, 'memory');
  const ready = await m.pauses.whenReady('alice', run.runId);
  assert.equal(run.state, 'READY');
  assert.notEqual(ready.sandbox.id, first.id);
  assert.equal(provider.madeOn.get(ready.sandbox.id), first.keepable, 'on the same workspace');
  assert.equal(provider.sandboxes.has(first.id), false, 'the sandbox holding the checkpoint is gone');
  assert.equal(run.pause?.depth, 'portable');
  assert.match(ready.takeResumeNotice() ?? '', /memory could not be restored.*checkpoint image damaged/);
  await m.close(false);
});

test('a restored sandbox that ends before its runner answers: resumed from the workspace, never failed by that end', async () => {
  const { m } = gateway(new FakeProvider().memoryPausable({ restoredEnds: true }));
  const run = await m.lifecycle.create('alice', runSpec());
  await m.pauses.pause('alice', run.runId);
  assert.equal(run.pause?.depth, 'memory');
  const ready = await m.pauses.whenReady('alice', run.runId);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(run.state, 'READY', run.error);
  assert.equal((ready.sandbox as FakeSandbox).running, true);
  assert.match(ready.takeResumeNotice() ?? '', /memory could not be restored/);
  await m.close(false);
});

test('a restart: a whole checkpoint is kept and restored; one never seen written whole is never restored', async () => {
  const provider = new FakeProvider().memoryPausable();
  const first = gateway(provider);
  const whole = await first.m.lifecycle.create('alice', runSpec({ conversationId: 'whole' }));
  const half = await first.m.lifecycle.create('alice', runSpec({ conversationId: 'half' }));
  (whole.sandbox as FakeSandbox).memory.x = 1;
  await first.m.pauses.pause('alice', whole.runId);
  // `half`: the gateway died while its checkpoint was being written (the record names none yet).
  const halfSandbox = half.sandbox as FakeSandbox;
  const store = new PausedStore(path.join(first.config.stateDir, 'paused', 'unit'));
  await store.write(
    half.runId,
    PausedStore.recordOf(half, halfSandbox.keepable!, {
      depth: 'memory',
      pausedAt: new Date(),
      reason: 'idle',
      stateBytes: 0,
      notKept: [],
      checkpoint: { sandbox: halfSandbox.id, name: '' },
    }),
  );
  await first.m.close(true);

  const second = gateway(provider, first.config.stateDir);
  assert.deepEqual(await second.m.recovery.recover(), { recovered: 0, removed: 0, left: 0, paused: 2 });
  const w = second.m.registry.get('alice', whole.runId);
  assert.equal(w.pause?.depth, 'memory');
  const h = second.m.registry.get('alice', half.runId);
  assert.equal(h.state, 'PAUSED');
  assert.equal(h.pause?.depth, 'portable', 'never restored from a checkpoint nobody saw written whole');
  assert.match(h.pause?.notKept.at(-1) ?? '', /while its checkpoint was being written/);
  assert.equal(provider.sandboxes.has(halfSandbox.id), false, 'its sandbox was let go, its workspace kept');
  assert.equal((await store.read(half.runId))?.pause.checkpoint, undefined, 'the record says so too');

  const back = await second.m.pauses.whenReady('alice', whole.runId);
  assert.deepEqual((back.sandbox as FakeSandbox).memory, { x: 1 });
  const halfBack = await second.m.pauses.whenReady('alice', half.runId);
  assert.equal(provider.madeOn.get(halfBack.sandbox.id), halfSandbox.keepable);
  await second.m.close(false);
});

test('DeleteRun of a run paused at memory depth removes its stopped sandbox and its record', async () => {
  const { m, provider, config } = gateway();
  const run = await m.lifecycle.create('alice', runSpec());
  const id = run.sandbox!.id;
  await m.pauses.pause('alice', run.runId);
  await m.lifecycle.delete('alice', run.runId);
  assert.ok(provider.removed.includes(id), 'the sandbox holding the checkpoint is removed');
  assert.deepEqual(records(config.stateDir), []);
  await m.close(false);
});

test('a fork of a run paused at memory depth resumes it first and forks from its state', async () => {
  const { m } = gateway();
  const run = await m.lifecycle.create('alice', runSpec());
  await m.pauses.pause('alice', run.runId);
  const forks = await m.pauses.fork('alice', run.runId, 2);
  assert.equal(run.state, 'READY', 'the parent goes on');
  for (const f of forks) assert.equal(f.state, 'READY');
  await m.close(false);
});

test('a memory fork copies the running sandbox: each fork has what the parent held, its runner serves the fork, the parent goes on', async () => {
  const { m, provider } = gateway();
  const run = await m.lifecycle.create('alice', runSpec());
  const parent = run.sandbox as FakeSandbox;
  parent.memory.x = 42;
  const forks = await m.pauses.fork('alice', run.runId, 2);
  assert.equal(run.state, 'READY', 'the parent goes on');
  assert.equal(run.sandbox?.id, parent.id, 'on its own sandbox, woken');
  assert.equal(parent.quiesced, false);
  for (const f of forks) {
    assert.equal(f.state, 'READY', f.error);
    assert.equal(f.pause?.depth, 'memory');
    const sb = f.sandbox as FakeSandbox;
    assert.notEqual(sb.id, parent.id);
    assert.deepEqual(sb.memory, { x: 42 }, "the parent's memory");
    assert.equal(sb.boundTo, f.runId, 'its runner serves the fork now');
    assert.match(f.takeResumeNotice() ?? '', new RegExp(`fork of run ${run.runId}, copied at memory depth`));
  }
  (forks[0].sandbox as FakeSandbox).memory.y = 1;
  assert.deepEqual(parent.memory, { x: 42 }, 'nothing a fork does reaches the parent');
  assert.equal(provider.checkpoints.get(parent.id)?.size, 0, 'the checkpoint is used up');
  await m.close(false);
});

test('a memory fork whose checkpoint fails forks at portable depth; a copy that fails alone is FAILED, the others go on', async () => {
  const snapshotFails = gateway(new FakeProvider().memoryPausable({ snapshot: 'engine: refused' }));
  const run = await snapshotFails.m.lifecycle.create('alice', runSpec());
  const forks = await snapshotFails.m.pauses.fork('alice', run.runId, 2);
  assert.equal(run.state, 'READY');
  for (const f of forks) {
    assert.equal(f.state, 'READY', f.error);
    assert.equal(f.pause?.depth, 'portable', 'from the state the runner wrote');
  }
  await snapshotFails.m.close(false);

  const copyFails = gateway(new FakeProvider().memoryPausable({ copy: 1 }));
  const parent = await copyFails.m.lifecycle.create('alice', runSpec());
  const [ok, failed] = await copyFails.m.pauses.fork('alice', parent.runId, 2);
  assert.equal(ok.state, 'READY', ok.error);
  assert.equal(failed.state, 'FAILED');
  assert.match(failed.error, /the fork could not be made: the copy did not start/);
  assert.ok(copyFails.provider.dropped.includes(`ws-${failed.runId}`), "the failed fork's workspace copy is removed");
  assert.equal(parent.state, 'READY');
  await copyFails.m.close(false);
});

test('a runner that cannot be quiesced: the pause is refused, the run READY, and its sandbox’s end is the run’s again', async () => {
  const { m } = gateway();
  const run = await m.lifecycle.create('alice', runSpec());
  const sb = run.sandbox as FakeSandbox;
  sb.runner.onRequest(QuiesceRequest.type, () => {
    throw new Error('a listener would not close');
  });
  await assert.rejects(m.pauses.pause('alice', run.runId), /could not be paused: .*a listener would not close/);
  assert.equal(run.state, 'READY');
  sb.exit({ reason: 'killed', exitCode: 137 });
  for (let i = 0; i < 50 && run.state === 'READY'; i++) await new Promise((r) => setTimeout(r, 10));
  assert.equal(run.state, 'FAILED', 'not let go of');
  await m.close(false);
});
