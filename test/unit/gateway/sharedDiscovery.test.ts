/**
 * Replicas that share their sandboxes (Kubernetes) learn of each other's runs from the
 * provider's watch: a run another replica made is taken up when its event arrives; a sandbox
 * claimed from the shared pool whose runner stays unbound past the start timeout (its claimer
 * died) is removed; one still being bound is looked at again soon and taken up once bound.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { assembleRuns } from '../../../gateway/src/server';
import { mkdtempSync, readdirSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  LABELS,
  SandboxExistsError,
  type SandboxChange,
  type SandboxInfo,
  type SandboxSpec,
  type SharedRunRecords,
} from '../../../gateway/src/sandbox/provider';
import { FakeProvider, type FakeSandbox, runSpec, testConfig, until } from './fakeSandbox';

/** A fake whose sandboxes every replica sees, with a watch the test drives. */
class WatchingProvider extends FakeProvider {
  private readonly listeners: ((c: SandboxChange) => void)[] = [];
  /** What the backend would say of a sandbox beyond its labels (booted, claimed when). */
  readonly extra = new Map<string, Partial<SandboxInfo>>();

  constructor() {
    super();
    this.capabilities = { ...this.capabilities, sharedState: true, pool: 'none' };
  }

  async watch(listener: (c: SandboxChange) => void): Promise<void> {
    this.listeners.push(listener);
  }

  protected listenersOf(): ((c: SandboxChange) => void)[] {
    return this.listeners;
  }

  override async list(labels: Record<string, string>): Promise<SandboxInfo[]> {
    return (await super.list(labels)).map((i) => ({ ...i, ...this.extra.get(i.id) }));
  }

  emit(sb: FakeSandbox, extra: Partial<SandboxInfo> = { ready: true }): void {
    this.extra.set(sb.id, extra);
    const info = { id: sb.id, labels: sb.labels, running: sb.running, ...extra };
    for (const l of this.listeners) l({ change: 'changed', info });
  }
}

const config = testConfig();
const limitMs = config.runs.startTimeoutSeconds * 1000 + 5000;

/** Labels of a run as a replica writes them on its sandbox, spec included. */
function runLabels(runId: string): Record<string, string> {
  const spec = runSpec({ conversationId: 'c' });
  return {
    [LABELS.managed]: 'true',
    [LABELS.instance]: config.instance,
    [LABELS.runId]: runId,
    [LABELS.tenant]: 'alice',
    [LABELS.spec]: Buffer.from(JSON.stringify({ spec, createdAt: new Date().toISOString() })).toString('base64'),
  };
}

test("a run another replica made is known from the watch's event, without a list", async () => {
  const provider = new WatchingProvider();
  const a = assembleRuns(config, provider);
  const b = assembleRuns(config, provider);
  await b.recovery.startDiscovery();
  const run = await a.lifecycle.create('alice', runSpec({ conversationId: 'made-on-a' }));
  assert.equal(b.registry.has(run.runId), false);
  const t0 = Date.now();
  provider.emit(provider.sandboxes.get(run.sandbox!.id)!);
  await until(() => b.registry.has(run.runId), 1000);
  assert.ok(Date.now() - t0 < 1000);
  await until(() => b.registry.all().find((r) => r.runId === run.runId)?.state === 'READY', 1000);
  b.recovery.stopDiscovery();
});

test('a claim whose runner was never bound, older than the start timeout, is removed and never shown', async () => {
  const provider = new WatchingProvider();
  const b = assembleRuns(config, provider);
  await b.recovery.startDiscovery();
  const orphan = await provider.create({
    runId: 'pool-1',
    tenant: '',
    labels: runLabels('run-orphan'),
    limits: {} as never,
  });
  provider.emit(orphan, { ready: true, claimedAt: Date.now() - limitMs - 1000 });
  await until(() => provider.removed.includes(orphan.id), 2000);
  assert.equal(b.registry.has('run-orphan'), false);
  b.recovery.stopDiscovery();
});

test('a claim still being bound is looked at again soon, and taken up once its claimer bound it', async () => {
  const provider = new WatchingProvider();
  const b = assembleRuns(config, provider);
  await b.recovery.startDiscovery();
  const claimed = await provider.create({
    runId: 'pool-2',
    tenant: '',
    labels: runLabels('run-young'),
    limits: {} as never,
  });
  provider.emit(claimed, { ready: true, claimedAt: Date.now() });
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(b.registry.has('run-young'), false, 'unbound: not a run yet');
  // The claimer's bind lands.
  claimed.boundTo = 'run-young';
  const t0 = Date.now();
  await until(() => b.registry.has('run-young'), 2000);
  assert.ok(Date.now() - t0 < 1000, `known ${Date.now() - t0} ms after the bind`);
  assert.equal(provider.removed.includes(claimed.id), false);
  b.recovery.stopDiscovery();
});

/** Paused records every replica reads, as a provider keeps them in its backend (Kubernetes: on the claim). */
class SharedRecords implements SharedRunRecords {
  readonly records = new Map<string, { workspace: string; record: unknown }>();
  async write(runId: string, workspace: string, record: unknown): Promise<void> {
    this.records.set(runId, { workspace, record: structuredClone(record) });
  }
  async read(runId: string): Promise<unknown> {
    return structuredClone(this.records.get(runId)?.record);
  }
  async remove(runId: string): Promise<void> {
    this.records.delete(runId);
  }
  async list(): Promise<string[]> {
    return [...this.records.keys()];
  }
}

class PausingWatchingProvider extends WatchingProvider {
  readonly pausedRecords = new SharedRecords();
  constructor() {
    super();
    this.pausable();
    this.capabilities = { ...this.capabilities, sharedState: true, pool: 'none' };
  }
  gone(id: string, labels: Record<string, string>): void {
    for (const l of this.listenersOf()) l({ change: 'removed', info: { id, labels, running: false } });
  }
  /** Runs whose resume made a sandbox: another made for them is refused, as a pod of the same name is. */
  readonly resumed = new Set<string>();
  refused = 0;
  override async create(spec: SandboxSpec): Promise<FakeSandbox> {
    if (spec.keptWorkspace) {
      if (this.resumed.has(spec.runId) && ++this.refused)
        throw new SandboxExistsError(`the sandbox of ${spec.runId} exists already`);
      this.resumed.add(spec.runId);
    }
    return super.create(spec);
  }
}

/** Two replicas of one instance over the same provider, each with its own state directory, discovering. */
async function twoReplicas(provider: PausingWatchingProvider) {
  const bState = mkdtempSync(path.join(os.tmpdir(), 'tether-b-'));
  const a = assembleRuns({ ...config, stateDir: mkdtempSync(path.join(os.tmpdir(), 'tether-a-')) }, provider);
  const b = assembleRuns({ ...config, stateDir: bState }, provider);
  await a.recovery.startDiscovery(50);
  await b.recovery.startDiscovery(50);
  const stop = () => {
    a.recovery.stopDiscovery();
    b.recovery.stopDiscovery();
  };
  return { a, b, bState, stop };
}

const known = (m: ReturnType<typeof assembleRuns>, runId: string) => m.registry.all().find((r) => r.runId === runId);

test('paused records in the provider: a pause on one replica is a pause on the other, which resumes it; a delete there is seen here', async () => {
  const provider = new PausingWatchingProvider();
  const { a, b, bState, stop } = await twoReplicas(provider);
  try {
    // Made through A, taken up by B (a fake sandbox talks to the replica that attached last).
    const run = await a.lifecycle.create('alice', runSpec({ conversationId: 'paused-shared' }));
    const first = provider.sandboxes.get(run.sandbox!.id)!;
    provider.emit(first);
    await until(() => known(b, run.runId)?.state === 'READY', 1000);

    // Paused through B: its record is in the provider, and A, told the sandbox is gone, reads it.
    await b.pauses.pause('alice', run.runId);
    assert.deepEqual(await provider.pausedRecords.list(), [run.runId]);
    assert.equal(readdirSync(bState).includes('paused'), false, 'nothing in the state directory');
    provider.gone(first.id, first.labels);
    await until(() => known(a, run.runId)?.state === 'PAUSED', 1000);
    assert.equal(known(a, run.runId)?.pause?.reason, 'requested');

    // A call through A resumes it; B takes up A's new sandbox once the resume is done.
    const ready = await a.pauses.whenReady('alice', run.runId);
    assert.equal(provider.madeOn.get(ready.sandbox.id), first.keepable, 'resumed on the kept workspace');
    assert.deepEqual(await provider.pausedRecords.list(), []);
    const second = provider.sandboxes.get(ready.sandbox.id)!;
    provider.emit(second);
    await until(() => known(b, run.runId)?.state === 'READY', 1000);
    assert.equal(known(b, run.runId)?.pause?.reason, 'requested', 'the pause it ended is still its last');

    // Paused again through B, then deleted through A: B forgets it from the records alone.
    await b.pauses.pause('alice', run.runId);
    provider.gone(second.id, second.labels);
    await until(() => known(a, run.runId)?.state === 'PAUSED', 1000);
    await a.lifecycle.delete('alice', run.runId);
    assert.deepEqual(await provider.pausedRecords.list(), []);
    await until(() => known(b, run.runId) === undefined, 1000);

    // A run paused by a replica this one never heard of is listed from its record.
    await provider.pausedRecords.write('run-elsewhere', 'ws-elsewhere', {
      runId: 'run-elsewhere',
      tenant: 'alice',
      spec: runSpec(),
      createdAt: new Date().toISOString(),
      start: 'cold',
      workspace: 'ws-elsewhere',
      pause: { depth: 'portable', reason: 'idle', stateBytes: 0, notKept: [], pausedAt: new Date().toISOString() },
    });
    await until(() => known(b, 'run-elsewhere')?.state === 'PAUSED', 1000);
  } finally {
    stop();
  }
});

test('two replicas resume one paused run at once: one makes its sandbox, the other waits for it and takes it up', async () => {
  const provider = new PausingWatchingProvider();
  const { a, b, stop } = await twoReplicas(provider);
  try {
    const run = await a.lifecycle.create('alice', runSpec({ conversationId: 'resumed-twice' }));
    const first = provider.sandboxes.get(run.sandbox!.id)!;
    provider.emit(first);
    await until(() => known(b, run.runId)?.state === 'READY', 1000);
    // Through B, which serves it now (a fake sandbox talks to the replica that attached last).
    await b.pauses.pause('alice', run.runId);
    provider.gone(first.id, first.labels);
    await until(() => known(a, run.runId)?.state === 'PAUSED', 1000);

    // Both at once: A's create comes first; B's is refused (it exists) and B waits for A's resume.
    const throughA = a.pauses.whenReady('alice', run.runId);
    const throughB = b.pauses.whenReady('alice', run.runId);
    const ready = await throughA;
    assert.equal(known(b, run.runId)?.state !== 'READY', true, 'B has not taken it up before the watch says so');
    provider.emit(provider.sandboxes.get(ready.sandbox.id)!);
    const onB = await throughB;
    assert.equal(onB.sandbox.id, ready.sandbox.id, 'one sandbox, served by both');
    const made = [...provider.madeOn.entries()].filter(([, ws]) => ws === first.keepable);
    assert.equal(made.length, 1, 'one sandbox made on the kept workspace');
    assert.equal(provider.refused, 1, "B's was refused");
    assert.deepEqual(await provider.pausedRecords.list(), []);
    assert.equal(known(a, run.runId)?.state, 'READY');
    assert.equal(known(b, run.runId)?.state, 'READY');
  } finally {
    stop();
  }
});
