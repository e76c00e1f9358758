import { test } from 'node:test';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import assert from 'node:assert/strict';
import { assembleRuns, type GatewayRuns } from '../../../gateway/src/server';
import { Metrics } from '../../../gateway/src/observability/metrics';
import { Telemetry } from '../../../gateway/src/observability/Telemetry';
import { summarizeMetrics } from '../../../gateway/src/observability/metricsSummary';
import { startOtlpReceiver } from '../../helpers/otlp';
import { FakeProvider, runSpec, testConfig, TOOLS } from './fakeSandbox';

// Only the SDK and exporter count: prom-client itself requires the small @opentelemetry/api.
const otelLoaded = () =>
  Object.keys(require.cache).some((k) => /@opentelemetry\/(sdk-trace-base|exporter-trace-otlp-http)\//.test(k));

async function seriesCount(m: Metrics): Promise<number> {
  return (await m.registry.getMetricsAsJSON()).reduce(
    (n, metric) => n + (metric as { values: unknown[] }).values.length,
    0,
  );
}

/** Runs `n` runs through create, calls (known and made-up tool names, every outcome) and delete. */
async function session(runs: GatewayRuns, telemetry: Telemetry, n: number, from: number): Promise<void> {
  const outcomes = ['ok', 'is_error', 'cancelled', 'NOT_FOUND', 'UNAVAILABLE'];
  for (let i = from; i < from + n; i++) {
    const tenant = i % 2 ? 'alice' : 'bob';
    const run = await runs.lifecycle.create(tenant, runSpec());
    for (const [j, tool] of [TOOLS[0].name, `made-up-${i}`, TOOLS[1].name].entries()) {
      const call = telemetry.call(
        tenant,
        { runId: run.runId, tool, callId: `c-${i}-${j}`, argumentsJson: '{}' },
        undefined,
      );
      if (!tool.startsWith('made-up')) call.resolved(TOOLS.find((x) => x.name === tool)!.tier, {});
      call.finish(outcomes[(i + j) % outcomes.length]);
    }
    await runs.lifecycle.delete(tenant, run.runId);
  }
}

test('label cardinality: the series of 1,000 runs are those of 10 runs (no run ids, no client tool names)', async () => {
  const metrics = new Metrics({ defaults: false });
  const telemetry = new Telemetry(metrics);
  // Unbounded creates and memory: this test is about label cardinality, not tenancy.
  const config = testConfig({ maxPerTenant: 5000 });
  config.tenancy = {
    ...config.tenancy,
    default: { createRun: { perSecond: 1e6, burst: 1e6 }, memoryMb: 1e9, cpuMillis: 1e9, diskMb: 1e9 },
  };
  const runs = assembleRuns(config, new FakeProvider(), telemetry);
  await session(runs, telemetry, 10, 0);
  const after10 = await seriesCount(metrics);
  await session(runs, telemetry, 990, 10);
  const after1000 = await seriesCount(metrics);
  assert.equal(after1000, after10);
  assert.ok(after1000 < 400, `${after1000} series`);
  const text = await metrics.text();
  assert.ok(!/run-[0-9a-f-]{36}/.test(text), 'no run id is a label value');
  assert.ok(!text.includes('made-up'), 'an unknown tool is labelled unknown');
  assert.match(text, /tether_calls_total\{tool="unknown",tier="unknown",outcome="NOT_FOUND"\} \d+/);
  assert.match(text, /tether_runs_created_total\{tenant="alice"\} 500/);
  assert.match(text, /tether_runs_deleted_total\{tenant="bob"\} 500/);
  await runs.close(false);
});

test('the live runs gauge is read from the runs at scrape time, by state and tenant', async () => {
  const metrics = new Metrics({ defaults: false });
  const runs = assembleRuns(testConfig(), new FakeProvider(), new Telemetry(metrics));
  const a = await runs.lifecycle.create('alice', runSpec());
  await runs.lifecycle.create('alice', runSpec());
  await runs.lifecycle.create('bob', runSpec());
  let text = await metrics.text();
  assert.match(text, /tether_runs\{state="READY",tenant="alice"\} 2/);
  assert.match(text, /tether_runs\{state="READY",tenant="bob"\} 1/);
  await runs.lifecycle.delete('alice', a.runId);
  text = await metrics.text();
  assert.match(text, /tether_runs\{state="READY",tenant="alice"\} 1/);
  await runs.close(false);
});

test('tracing off loads no OpenTelemetry SDK; configured, it does', async () => {
  const off = await Telemetry.start({
    metrics: { listen: '' },
    audit: { path: '' },
    tracing: { otlpEndpoint: '', serviceName: 'x' },
  });
  assert.equal(off, Telemetry.off);
  off
    .call(
      'alice',
      { runId: 'r', tool: 't', callId: 'c', argumentsJson: '{}' },
      '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    )
    .finish('ok');
  assert.equal(otelLoaded(), false);
  const receiver = await startOtlpReceiver();
  const on = await Telemetry.start({
    metrics: { listen: '' },
    audit: { path: '' },
    tracing: { otlpEndpoint: receiver.url, serviceName: 'x' },
  });
  assert.equal(otelLoaded(), true);
  await on.tracer?.close();
  await receiver.close();
});

test('tether metrics: the summary shows non-zero tether series, histograms as count and mean', async () => {
  const metrics = new Metrics();
  const telemetry = new Telemetry(metrics);
  const call = telemetry.call('alice', { runId: 'r', tool: 'read', callId: 'c', argumentsJson: '{}' }, undefined);
  call.resolved('read', {});
  call.finish('ok');
  const summary = summarizeMetrics(await metrics.text());
  assert.match(summary, /^tether_calls_total\{tool="read",tier="read",outcome="ok"\} {2}1$/m);
  assert.match(
    summary,
    /^tether_call_duration_seconds\{tool="read",tier="read",outcome="ok"\} {2}n=1 mean=\d+\.\dms$/m,
  );
  assert.ok(!summary.includes('tether_gateway_'), 'process metrics are left out');
  assert.ok(!summary.includes('_bucket'));
});

test('the Grafana dashboard queries only series the gateway exports', async () => {
  const dashboard = JSON.parse(
    readFileSync(path.resolve(__dirname, '../../../../deploy/grafana/tether.json'), 'utf8'),
  ) as { panels: { targets: { expr: string }[] }[] };
  const names = new Set((await new Metrics().registry.getMetricsAsJSON()).map((m) => m.name));
  const used = dashboard.panels.flatMap((p) =>
    p.targets.flatMap((t) => [...t.expr.matchAll(/\b(tether_[a-z0-9_]+)/g)].map((m) => m[1])),
  );
  assert.ok(used.length > 15);
  for (const u of used) assert.ok(names.has(u.replace(/_(bucket|sum|count)$/, '')), `${u} is not exported`);
});

test('language servers and kernels: gauges from the live runs reports, counters from what each report adds', async () => {
  const metrics = new Metrics({ defaults: false });
  const telemetry = new Telemetry(metrics);
  const runs = assembleRuns(testConfig(), new FakeProvider(), telemetry);
  const a = runs.registry.get('alice', (await runs.lifecycle.create('alice', runSpec())).runId);
  const b = runs.registry.get('bob', (await runs.lifecycle.create('bob', runSpec())).runId);
  const lsp = (alive: number, starts: number, crash = 0, request = 0) => ({
    kind: 'language_server' as const,
    name: 'pyright',
    alive,
    starts,
    restartsAfterCrash: crash,
    restartsRequested: request,
  });
  const py = (alive: number, starts: number, crash = 0, request = 0) => ({
    ...lsp(alive, starts, crash, request),
    kind: 'kernel' as const,
    name: 'python',
  });
  telemetry.runResources(a, { resources: [lsp(1, 1)] });
  telemetry.runResources(a, { resources: [lsp(1, 2, 1), py(1, 1)] });
  telemetry.runResources(a, { resources: [lsp(1, 2, 1), py(1, 2, 0, 1)] });
  // A gateway that connects to a run under way: its history is a baseline, not news.
  telemetry.runResources(b, { resources: [lsp(1, 5, 4)], replay: true });
  let text = await metrics.text();
  assert.match(text, /^tether_language_servers\{server="pyright"\} 2$/m);
  assert.match(text, /^tether_kernels\{language="python"\} 1$/m);
  assert.match(text, /^tether_language_server_starts_total\{server="pyright"\} 2$/m);
  assert.match(text, /^tether_language_server_restarts_total\{server="pyright",cause="crash"\} 1$/m);
  assert.match(text, /^tether_kernel_starts_total\{language="python"\} 2$/m);
  assert.match(text, /^tether_kernel_restarts_total\{language="python",cause="request"\} 1$/m);
  // Later news of the replayed run counts.
  telemetry.runResources(b, { resources: [lsp(1, 6, 5)], replay: true });
  text = await metrics.text();
  assert.match(text, /^tether_language_server_restarts_total\{server="pyright",cause="crash"\} 2$/m);
  await runs.lifecycle.delete('alice', a.runId);
  text = await metrics.text();
  assert.match(text, /^tether_language_servers\{server="pyright"\} 1$/m, 'a deleted run leaves the gauge');
  assert.ok(!/^tether_kernels\{/m.test(text), 'nor any kernel');
  await runs.close(false);
});

test('resource names a runner sends are labels only while well-formed and few', async () => {
  const metrics = new Metrics({ defaults: false });
  const telemetry = new Telemetry(metrics);
  const runs = assembleRuns(testConfig(), new FakeProvider(), telemetry);
  const run = runs.registry.get('alice', (await runs.lifecycle.create('alice', runSpec())).runId);
  const resources = Array.from({ length: 60 }, (_, i) => ({
    kind: 'language_server' as const,
    name: i === 0 ? 'Bad Name/../x' : `server-${i}`,
    alive: 1,
    starts: 1,
    restartsAfterCrash: 0,
    restartsRequested: 0,
  }));
  telemetry.runResources(run, { resources });
  const text = await metrics.text();
  const servers = [...text.matchAll(/^tether_language_servers\{server="([^"]+)"\} (\d+)$/gm)];
  assert.equal(servers.length, 33, '32 names and other');
  assert.equal(servers.find((m) => m[1] === 'other')?.[2], '28');
  assert.ok(!text.includes('Bad Name'));
  await runs.close(false);
});
