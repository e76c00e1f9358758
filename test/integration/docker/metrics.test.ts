import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { sampleOf } from '../../helpers/otlp';
import { Approval } from '@tether/contract';
import { resultText } from '../../../clients/typescript/src';
import { summarizeMetrics } from '../../../gateway/src/observability/metricsSummary';
import { fixture, killInRun, pidOf } from '../lsp/helpers';
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

/** Scrapes until `ok` holds for the page (run events reach the gateway just after the call's result). */
async function scrapeUntil(ok: (text: string) => boolean, what: string): Promise<string> {
  const until = Date.now() + 10_000;
  for (;;) {
    const text = await scrape();
    if (ok(text)) return text;
    if (Date.now() > until) assert.fail(`${what} never showed in /metrics:\n${summarizeMetrics(text)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test('docker: a language server and a kernel starting, restarting on request and after a crash move their series; disk use per tenant', async () => {
  const run = await t.alice.createRun({
    features: { lsp: true, eval: true },
    approvals: { exec: Approval.AUTO },
    limits: { memoryMb: 1024, diskMb: 64 },
  });
  assert.equal(run.error, '');
  await t.alice.putFileMap(run.runId, fixture('py'));
  const call = async (tool: string, args: Record<string, unknown>) => {
    const r = await t.alice.callTool(run.runId, tool, args, { deadlineMs: 120_000 });
    return { text: resultText(r.result), isError: r.result.isError };
  };
  const hover = { action: 'hover', file: 'geometry/main.py', line: 4, symbol: 'total_area' };
  const n = (text: string, name: string, labels: Record<string, string>) => sampleOf(text, name, labels);

  // A language server: started by the first call, restarted after a crash.
  assert.equal((await call('lsp', hover)).isError, false);
  await scrapeUntil((s) => n(s, 'tether_language_servers', { server: 'pyright' }) === 1, 'one pyright alive');
  killInRun(t, run.runId, pidOf((await call('lsp', { action: 'status' })).text, 'pyright'));
  await scrapeUntil((s) => n(s, 'tether_language_servers', { server: 'pyright' }) === 0, 'pyright gone');
  assert.equal((await call('lsp', hover)).isError, false);
  let text = await scrapeUntil(
    (s) => n(s, 'tether_language_server_restarts_total', { server: 'pyright', cause: 'crash' }) === 1,
    'a pyright restart after its crash',
  );
  assert.equal(n(text, 'tether_language_server_starts_total', { server: 'pyright' }), 2);
  assert.equal(n(text, 'tether_language_servers', { server: 'pyright' }), 1);

  // A kernel: started, reset on request, and dead then started again.
  const cell = async (code: string, reset = false) => {
    const r = await call('eval', { code, description: 'a cell for the resource metrics test', reset });
    assert.ok(!r.isError || code.includes('SIGKILL'), r.text);
    return r;
  };
  // Synced, so the blocks reach the workspace image now rather than at the next writeback.
  await cell(
    'import os\nwith open("fill.bin", "wb") as f:\n    f.write(b"\\1" * (8 << 20)); f.flush(); os.fsync(f.fileno())',
  );
  await scrapeUntil((s) => n(s, 'tether_kernels', { language: 'python' }) === 1, 'one python kernel');
  await cell('1', true);
  assert.match((await cell('import os, signal; os.kill(os.getpid(), signal.SIGKILL)')).text, /interpreter/);
  await cell('2');
  text = await scrapeUntil(
    (s) => n(s, 'tether_kernel_restarts_total', { language: 'python', cause: 'crash' }) === 1,
    'a kernel restart after its death',
  );
  assert.equal(n(text, 'tether_kernel_restarts_total', { language: 'python', cause: 'request' }), 1);
  assert.equal(n(text, 'tether_kernel_starts_total', { language: 'python' }), 3);
  assert.equal(n(text, 'tether_kernels', { language: 'python' }), 1);

  // The 8 MiB file on the run's 64 MiB workspace disk.
  const disk = n(text, 'tether_tenant_disk_bytes', { tenant: 'alice' });
  console.log(JSON.stringify({ diskBytes: disk }));
  assert.ok(disk >= 8 * 2 ** 20 && disk < 64 * 2 ** 20, `disk ${disk}`);
  assert.equal(n(text, 'tether_run_disk_max_bytes', { tenant: 'alice' }), disk);
  assert.ok(!text.includes(run.runId), 'no run id in a label');

  await t.alice.deleteRun(run.runId);
  text = await scrape();
  assert.equal(n(text, 'tether_language_servers', { server: 'pyright' }), 0);
  assert.equal(n(text, 'tether_kernels', { language: 'python' }), 0);
  assert.equal(n(text, 'tether_language_server_starts_total', { server: 'pyright' }), 2, 'counters keep their counts');
});
