/**
 * Replicas that share their sandboxes (Kubernetes) learn of each other's runs from the
 * provider's watch: a run another replica made is taken up when its event arrives; a sandbox
 * claimed from the shared pool whose runner stays unbound past the start timeout (its claimer
 * died) is removed; one still being bound is looked at again soon and taken up once bound.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { assembleRuns } from '../../../gateway/src/server';
import { LABELS, type SandboxChange, type SandboxInfo } from '../../../gateway/src/sandbox/provider';
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
