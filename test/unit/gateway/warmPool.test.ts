import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { status } from '@grpc/grpc-js';
import { GatewayError } from '../../../gateway/src/errors';
import type { RunStarted } from '../../../gateway/src/runs/RunRecord';
import { normalizeSpec } from '../../../gateway/src/runs/specChecks';
import { assembleRuns, type GatewayRuns } from '../../../gateway/src/server';
import { Metrics } from '../../../gateway/src/observability/metrics';
import { Telemetry } from '../../../gateway/src/observability/Telemetry';
import { classKey, WarmPool } from '../../../gateway/src/pool/WarmPool';
import { RunnerClient } from '../../../gateway/src/runs/RunnerClient';
import { BindRequest, InitializeRequest, PrepareRequest, type BindParams } from '../../../protocol/src/run';
import { answersInitialize, FakeProvider, runSpec, testConfig, TOOLS, until } from './fakeSandbox';

const LIMITS = { memoryMb: 256, cpuMillis: 500, pids: 64, diskMb: 64 };

function poolConfig(
  pool: Partial<ReturnType<typeof testConfig>['pool']> = {},
  stateDir = mkdtempSync(path.join(os.tmpdir(), 'tether-pool-')),
) {
  const base = testConfig();
  return {
    ...base,
    stateDir,
    limits: { default: LIMITS, max: { ...LIMITS, memoryMb: 1024 } },
    pool: { ...base.pool, size: 2, maxTotal: 4, maxMemoryMb: 4096, concurrency: 2, ...pool },
  };
}

/** Every bind and initialize (the run each was for) and every prepare the fake runners received, by sandbox id. */
function recordingProvider() {
  const inits = new Map<string, BindParams[]>();
  const prepares = new Map<string, number>();
  const provider = new FakeProvider((conn, sb) => {
    answersInitialize(conn, sb);
    const seen = (p: BindParams) => inits.set(sb.id, [...(inits.get(sb.id) ?? []), p]);
    conn.onRequest(InitializeRequest.type, (p) => {
      seen(p);
      sb.boundTo ??= p.runId;
      return { version: 'fake', tools: TOOLS };
    });
    conn.onRequest(BindRequest.type, (p) => {
      seen(p);
      sb.boundTo ??= p.runId;
      return { version: 'fake', tools: TOOLS };
    });
    conn.onRequest(PrepareRequest.type, () => {
      prepares.set(sb.id, (prepares.get(sb.id) ?? 0) + 1);
      return { version: 'fake' };
    });
  });
  return { provider, inits, prepares };
}

const idle = (m: GatewayRuns) => m.pool.warm?.stats().classes[0]?.idle ?? 0;

test('the pool fills to its size with labelled, prepared and unbound sandboxes', async () => {
  const { provider, inits, prepares } = recordingProvider();
  const m = assembleRuns(poolConfig(), provider);
  await m.pool.start();
  await until(() => idle(m) === 2);
  assert.equal(provider.sandboxes.size, 2);
  for (const sb of provider.sandboxes.values()) {
    assert.equal(sb.labels['dev.tether.pool'], classKey(LIMITS));
    assert.equal(sb.labels['dev.tether.tenant'], undefined);
  }
  assert.equal(inits.size, 0, 'a pooled runner learns its run only when claimed');
  assert.deepEqual([...prepares.values()], [1, 1], 'each pooled runner is prepared ahead of its claim');
  await m.close(false);
  assert.equal(provider.sandboxes.size, 0, 'idle pooled sandboxes are removed on close');
});

test('CreateRun claims a warm sandbox, each at most once, and the pool refills', async () => {
  const { provider, inits } = recordingProvider();
  const m = assembleRuns(poolConfig(), provider);
  const started: RunStarted[] = [];
  m.lifecycle.onRunStarted((e) => started.push(e));
  await m.pool.start();
  await until(() => idle(m) === 2);
  const a = await m.lifecycle.create('alice', runSpec());
  const b = await m.lifecycle.create('bob', runSpec());
  const c = await m.lifecycle.create('carol', runSpec({ limits: { memoryMb: 512 } }));
  assert.deepEqual([a.start, b.start, c.start], ['pool', 'pool', 'cold']);
  assert.deepEqual(
    started.map((e) => [e.start, e.ok]),
    [
      ['pool', true],
      ['pool', true],
      ['cold', true],
    ],
  );
  const ids = [a, b, c].map((r) => r.sandbox!.id);
  assert.equal(new Set(ids).size, 3);
  // The connection may say initialize more than once (it does again on every connect); it is
  // always the same run.
  assert.deepEqual(new Set(inits.get(a.sandbox!.id)!.map((p) => p.runId)), new Set([a.runId]));
  await until(() => idle(m) === 2);
  await m.lifecycle.delete('alice', a.runId);
  assert.ok(provider.removed.includes(a.sandbox!.id), 'a pooled sandbox is removed after its run');
  const d = await m.lifecycle.create('alice', runSpec());
  assert.equal(d.start, 'pool');
  assert.ok(!ids.includes(d.sandbox!.id), 'never the sandbox of an earlier run');
  assert.equal(m.pool.warm!.stats().claims, 3);
  await m.close(false);
});

test('the pool keeps within its total and its memory budget', async () => {
  const provider = new FakeProvider();
  const m = assembleRuns(poolConfig({ size: 10, maxTotal: 3, maxMemoryMb: 4096 }), provider);
  await m.pool.start();
  await until(() => idle(m) === 3);
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(provider.sandboxes.size, 3);
  await m.close(false);

  const p2 = new FakeProvider();
  const m2 = assembleRuns(poolConfig({ size: 10, maxTotal: 10, maxMemoryMb: 600 }), p2);
  await m2.pool.start();
  await until(() => idle(m2) === 2);
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(p2.sandboxes.size, 2, '2 × 256 MiB fit in 600 MiB, a third does not');
  assert.equal(m2.pool.warm!.stats().memoryMb, 512);
  await m2.close(false);
});

test('a pooled sandbox that dies while idle is replaced', async () => {
  const provider = new FakeProvider();
  const m = assembleRuns(poolConfig({ size: 1 }), provider);
  await m.pool.start();
  await until(() => idle(m) === 1);
  const first = [...provider.sandboxes.values()][0];
  first.exit({ reason: 'killed' });
  await until(() => idle(m) === 1 && !provider.sandboxes.has(first.id));
  const run = await m.lifecycle.create('alice', runSpec());
  assert.notEqual(run.sandbox!.id, first.id);
  assert.equal(run.start, 'pool');
  await m.close(false);
});

test('over its memory quota with the pool full: refused before anything is claimed', async () => {
  const provider = new FakeProvider();
  const config = poolConfig({ size: 2, maxTotal: 2 });
  config.tenancy = { ...config.tenancy, default: { memoryMb: 300 } };
  const m = assembleRuns(config, provider);
  await m.pool.start();
  await until(() => idle(m) === 2);
  const a = await m.lifecycle.create('alice', runSpec());
  assert.equal(a.start, 'pool');
  await until(() => idle(m) === 2);
  await assert.rejects(
    m.lifecycle.create('alice', runSpec()),
    (err) => err instanceof GatewayError && err.code === status.RESOURCE_EXHAUSTED && /memoryMb/.test(err.message),
  );
  assert.equal(idle(m), 2, 'the pool is untouched');
  assert.equal(m.registry.list('alice').length, 1, 'no half-made run');
  assert.equal(provider.sandboxes.size, 3);
  await m.close(false);
});

test('restart: a claimed sandbox is found again as its run, idle ones are adopted, the untrusted removed', async () => {
  const { provider, inits, prepares } = recordingProvider();
  const config = poolConfig({ size: 2 });
  const first = assembleRuns(config, provider);
  await first.pool.start();
  await until(() => idle(first) === 2);
  const run = await first.lifecycle.create('alice', runSpec({ conversationId: 'c9', labels: { team: 'x' } }));
  await until(() => idle(first) === 2);
  // The gateway dies: nothing is cleaned up (no close).
  first.pool.warm!.stop();
  for (const r of first.registry.list('alice')) r.runner?.dispose();
  const claimsDir = path.join(config.stateDir, 'pool', config.instance, 'claims');
  await fs.writeFile(
    path.join(claimsDir, 'sb-gone.json'),
    JSON.stringify({ runId: 'run-x', tenant: 't', spec: {}, createdAt: '' }),
  );
  await fs.writeFile(path.join(claimsDir, 'sb-half.json.123.tmp'), '{');
  // One idle sandbox's runner says it has a run though no claim names it: never handed out.
  const [kept, bound] = [...provider.sandboxes.values()].filter((sb) => sb.id !== run.sandbox!.id);
  bound.boundTo = 'run-elsewhere';

  const second = assembleRuns(config, provider);
  assert.deepEqual(await second.recovery.recover(), { recovered: 1, removed: 1, left: 0, paused: 0 });
  const again = second.registry.get('alice', run.runId);
  assert.equal(again.state, 'READY');
  assert.equal(again.start, 'pool');
  assert.equal(again.spec.conversationId, 'c9');
  assert.deepEqual(again.spec.labels, { team: 'x' });
  assert.deepEqual(new Set(inits.get(run.sandbox!.id)!.map((p) => p.runId)), new Set([run.runId]));
  assert.ok(inits.get(run.sandbox!.id)!.length >= 2, 'initialized again by the second gateway');
  assert.ok(provider.removed.includes(bound.id), 'a bound runner without a claim is removed');
  assert.equal(prepares.get(kept.id), 2, 'the idle one is prepared again by its new gateway');
  assert.deepEqual(await fs.readdir(claimsDir), [`${run.sandbox!.id}.json`]);
  await second.pool.start();
  await until(() => idle(second) === 2);
  assert.equal(provider.sandboxes.size, 3, 'one adopted, one new, the claimed one');
  const next = await second.lifecycle.create('bob', runSpec());
  assert.equal(next.start, 'pool');
  assert.equal(next.sandbox!.id, kept.id, 'the adopted sandbox is claimed first');
  assert.deepEqual(
    inits.get(kept.id)!.map((p) => p.runId),
    [next.runId],
  );
  await second.lifecycle.delete('alice', run.runId);
  await second.lifecycle.delete('bob', next.runId);
  assert.deepEqual(await fs.readdir(claimsDir), []);
  await second.close(false);
  assert.equal(provider.sandboxes.size, 0);
});

test('restart: a claim whose record was written but whose bind never came is bound by recovery', async () => {
  const { provider, inits } = recordingProvider();
  const config = poolConfig({ size: 1 });
  const first = assembleRuns(config, provider);
  await first.pool.start();
  await until(() => idle(first) === 1);
  first.pool.warm!.stop();
  const [sb] = [...provider.sandboxes.values()];
  // The gateway died between the record and the bind.
  const claimsDir = path.join(config.stateDir, 'pool', config.instance, 'claims');
  await fs.mkdir(claimsDir, { recursive: true });
  const spec = normalizeSpec(config, runSpec({ conversationId: 'mid-claim' }));
  await fs.writeFile(
    path.join(claimsDir, `${sb.id}.json`),
    JSON.stringify({ runId: 'run-mid', tenant: 'alice', spec, createdAt: new Date().toISOString() }),
  );
  const second = assembleRuns(config, provider);
  assert.deepEqual(await second.recovery.recover(), { recovered: 1, removed: 0, left: 0, paused: 0 });
  assert.equal(second.registry.get('alice', 'run-mid').state, 'READY');
  assert.deepEqual(
    inits.get(sb.id)!.map((p) => p.runId),
    ['run-mid'],
  );
  await second.close(false);
  assert.equal(provider.sandboxes.size, 0);
});

test('restart: idle pooled sandboxes are removed when the pool is off or keeps another class', async () => {
  for (const over of [{ size: 0 }, {}]) {
    const provider = new FakeProvider();
    const config = poolConfig({ size: 2 });
    const first = assembleRuns(config, provider);
    await first.pool.start();
    await until(() => idle(first) === 2);
    await first.close(true);
    assert.equal(provider.sandboxes.size, 2, 'a graceful stop keeping runs leaves the idle pool for the next gateway');
    const next = poolConfig({ size: 2, ...over }, config.stateDir);
    // Another default class: what the earlier gateway pooled does not fit it.
    if (!('size' in over)) next.limits = { ...next.limits, default: { ...LIMITS, memoryMb: 320 } };
    const second = assembleRuns(next, provider);
    assert.deepEqual(await second.recovery.recover(), { recovered: 0, removed: 2, left: 0, paused: 0 });
    assert.equal(provider.sandboxes.size, 0);
    await second.close(false);
  }
});

test('WarmPool retries after a failed start without spinning', async () => {
  let calls = 0;
  const provider = new FakeProvider();
  const create = provider.create.bind(provider);
  provider.create = async (spec) => {
    if (++calls <= 2) throw new Error('engine hiccup');
    return create(spec);
  };
  const pool = new WarmPool({
    provider,
    instance: 'u',
    targets: [{ limits: LIMITS, size: 1 }],
    maxTotal: 4,
    maxMemoryMb: 4096,
    concurrency: 1,
    prepare: async (sb) => {
      const runner = new RunnerClient(sb);
      await runner.prepare({ workspace: sb.workspacePath, settings: {} }, 1000);
      return runner;
    },
    admit: (s) => s(),
    retryMs: 20,
  });
  pool.start();
  await until(() => pool.stats().classes[0].idle === 1, 1000);
  assert.equal(calls, 3);
  assert.equal(pool.stats().failures, 2);
  await pool.close();
});

test('a template is a pool class of its own: its sandboxes run its image and only its runs claim them', async () => {
  const provider = new FakeProvider();
  const pool = new WarmPool({
    provider,
    instance: 'u',
    targets: [
      { limits: LIMITS, size: 1 },
      { limits: LIMITS, image: 'tether-template-rust:abc', size: 1 },
    ],
    maxTotal: 4,
    maxMemoryMb: 4096,
    concurrency: 2,
    prepare: async (sb) => {
      const runner = new RunnerClient(sb);
      await runner.prepare({ workspace: sb.workspacePath, settings: {} }, 1000);
      return runner;
    },
    admit: (s) => s(),
  });
  pool.start();
  await until(() => pool.stats().classes.every((c) => c.idle === 1), 1000);
  const [base, tpl] = pool.stats().classes;
  assert.equal(base.key, classKey(LIMITS));
  assert.equal(tpl.key, classKey(LIMITS, 'tether-template-rust:abc'));
  assert.match(tpl.key, /^m256-c500-p64-d64-i[0-9a-f]{12}$/, 'a label value: the image only as a hash');
  assert.equal(tpl.image, 'tether-template-rust:abc');

  assert.equal(pool.claim(LIMITS, 'tether-template-other:1'), undefined, 'another template misses');
  const claimed = pool.claim(LIMITS, 'tether-template-rust:abc');
  assert.ok(claimed);
  assert.equal(provider.images.get(claimed.sandbox.id), 'tether-template-rust:abc');
  assert.equal(provider.sandboxes.get(claimed.sandbox.id)?.labels['dev.tether.pool'], tpl.key);
  const plain = pool.claim(LIMITS);
  assert.ok(plain);
  assert.equal(provider.images.get(plain.sandbox.id), undefined, 'the runner image');
  claimed.runner.dispose();
  plain.runner.dispose();
  await pool.close();
});

test('/metrics shows the pool: idle and starting sandboxes per class', async () => {
  const metrics = new Metrics({ defaults: false });
  const m = assembleRuns(poolConfig(), new FakeProvider(), new Telemetry(metrics));
  await m.pool.start();
  await until(() => idle(m) === 2);
  const text = await metrics.text();
  assert.match(text, new RegExp(`tether_pool_sandboxes\\{class="${classKey(LIMITS)}",state="idle"\\} 2`));
  assert.match(text, new RegExp(`tether_pool_sandboxes\\{class="${classKey(LIMITS)}",state="starting"\\} 0`));
  assert.equal((await m.lifecycle.create('alice', runSpec())).start, 'pool');
  await until(() => idle(m) === 2);
  assert.match(await metrics.text(), /tether_create_run_duration_seconds_count\{start="pool",outcome="ready"\} 1/);
  await m.close(false);
});

test('a provider that declares no pool gets none: every run starts cold', async () => {
  const provider = new FakeProvider();
  provider.capabilities = { ...provider.capabilities, pool: 'none' };
  const m = assembleRuns(poolConfig(), provider);
  await m.pool.start();
  assert.equal(m.pool.warm, undefined);
  assert.equal(provider.sandboxes.size, 0);
  const run = await m.lifecycle.create('alice', runSpec());
  assert.equal(run.start, 'cold');
  await m.close(false);
});
