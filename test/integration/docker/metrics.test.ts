import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { sampleOf } from '../../helpers/otlp';
import { runnerImage } from './support';

let t: TestGateway;
before(async () => {
  t = await startTestGateway({
    provider: 'docker',
    docker: { image: runnerImage() },
    metrics: { listen: '127.0.0.1:0' },
  });
});
after(async () => {
  await t?.close();
});

const scrape = async () => (await fetch(`http://${t.gateway.metricsAddress}/metrics`)).text();

test('docker: run memory and CPU reach /metrics per tenant, from the engine, and leave with the run', async () => {
  const run = await t.alice.createRun({ limits: { memoryMb: 256 } });
  assert.equal(run.error, '');
  // Some work in the run, so its CPU time is not zero.
  await t.alice.putFileMap(run.runId, { 'a.txt': 'x\n'.repeat(1000) });
  for (let i = 0; i < 20; i++) await t.alice.callTool(run.runId, 'read', { path: 'a.txt' });

  const began = performance.now();
  const text = await scrape();
  const scrapeMs = performance.now() - began;
  const memory = sampleOf(text, 'tether_tenant_memory_bytes', { tenant: 'alice' });
  const largest = sampleOf(text, 'tether_run_memory_max_bytes', { tenant: 'alice' });
  const cpu = sampleOf(text, 'tether_tenant_cpu_seconds', { tenant: 'alice' });
  console.log(
    JSON.stringify({ memoryBytes: memory, largestRunBytes: largest, cpuSeconds: cpu, scrapeMs: Math.round(scrapeMs) }),
  );
  assert.ok(memory > 1024 * 1024 && memory < 256 * 1024 * 1024, `memory ${memory}`);
  assert.equal(largest, memory, 'one run: the largest is the sum');
  assert.ok(cpu > 0, `cpu ${cpu}`);
  assert.equal(sampleOf(text, 'tether_runs', { state: 'READY', tenant: 'alice' }), 1);
  assert.ok(!text.includes(run.runId), 'no run id in a label');

  await t.alice.deleteRun(run.runId);
  const afterDelete = await scrape();
  assert.equal(sampleOf(afterDelete, 'tether_tenant_memory_bytes', { tenant: 'alice' }), 0);
  assert.equal(sampleOf(afterDelete, 'tether_runs_deleted_total', { tenant: 'alice' }), 1);
  assert.equal(
    sampleOf(afterDelete, 'tether_create_run_duration_seconds_count', { start: 'cold', outcome: 'ready' }),
    1,
  );
});
