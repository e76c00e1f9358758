/**
 * The warm pool, measured side by side in one run:
 *  1. CreateRun → first tool answer with a claim from a full pool, over N runs one after another;
 *  2. the same for a cold start (a class the pool does not keep), the pool full and quiet meanwhile;
 *  3. `docker run` of the same image (`node -e 0`, the CLI end to end) as the baseline;
 *  4. memory of an idle pooled sandbox (its cgroup: runner + init), never initialized;
 *  5. a burst of B CreateRuns at once from a pool of P: every latency, how many came from the
 *     pool, and how long until the pool is full again.
 * Usage: node dist/bench/pool.js [runs=30] [burst=50] [poolSize=10] [runtime=]
 */
import { execFile } from 'node:child_process';
import * as os from 'node:os';
import { promisify } from 'node:util';
import Docker from 'dockerode';
import { RunStart } from '../gen/tether/v1/gateway_pb';
import { resultText } from '../clients/typescript/src';
import { defaultConfig } from '../gateway/src/config';
import { readImagesEnv } from '../gateway/src/sandbox/image';
import { LABELS } from '../gateway/src/sandbox/provider';
import { startTestGateway, type TestGateway } from '../test/helpers/gateway';
import { summary, timeIt, writeResult } from './lib';

const RUNS = Number(process.argv[2] ?? 30);
const BURST = Number(process.argv[3] ?? 50);
const POOL = Number(process.argv[4] ?? 10);
const RUNTIME = process.argv[5] ?? '';
const run = promisify(execFile);
const docker = new Docker();
const image = process.env.TETHER_IMAGE || readImagesEnv().TETHER_IMAGE;
if (!image) throw new Error('no runner image: run scripts/setup.sh');
const LIMITS = { memoryMb: 512, cpuMillis: 1000, pids: 256, diskMb: 256 };
const mib = (b: number) => Math.round((b / 2 ** 20) * 10) / 10;

const idle = (t: TestGateway) => t.gateway.runs.pool?.stats().classes[0]?.idle ?? 0;
async function full(t: TestGateway, size: number): Promise<number> {
  const t0 = performance.now();
  while (idle(t) < size) await new Promise((r) => setTimeout(r, 20));
  return performance.now() - t0;
}

/** CreateRun, then a first `write` answered: the time an agent waits before its first tool works. */
async function createAndCall(t: TestGateway, i: number, limits?: typeof LIMITS) {
  const client = i % 2 ? t.bob : t.alice;
  const t0 = performance.now();
  const r = await client.createRun({ conversationId: `pool-${i}`, limits });
  const t1 = performance.now();
  if (r.error) throw new Error(r.error);
  const out = await client.callTool(r.runId, 'write', { path: 'first.txt', content: 'first\n' });
  const t2 = performance.now();
  if (out.result.isError) throw new Error(resultText(out.result));
  return {
    runId: r.runId,
    client,
    start: r.start === RunStart.POOL ? 'pool' : 'cold',
    create: t1 - t0,
    total: t2 - t0,
    firstCall: t2 - t1,
  };
}

async function sequential(t: TestGateway, size: number, limits?: typeof LIMITS) {
  const total: number[] = [];
  const create: number[] = [];
  const starts: Record<string, number> = {};
  for (let i = 0; i < RUNS; i++) {
    await full(t, size); // nothing else going on: the pool is full and quiet
    const r = await createAndCall(t, i, limits);
    total.push(r.total);
    create.push(r.create);
    starts[r.start] = (starts[r.start] ?? 0) + 1;
    await r.client.deleteRun(r.runId);
  }
  return { starts, createToFirstAnswer: summary(total), createRun: summary(create) };
}

async function dockerRunBaseline() {
  const samples: number[] = [];
  const args = ['run', '--rm', '--network', 'none', '--log-driver', 'none', '--label', 'dev.tether.bench=true'];
  if (RUNTIME) args.push('--runtime', RUNTIME);
  for (let i = 0; i < RUNS; i++)
    samples.push(await timeIt(() => run('docker', [...args, '--entrypoint', 'node', image!, '-e', '0'])));
  return summary(samples);
}

async function pooledMemory(instance: string) {
  const filters = JSON.stringify({ label: [`${LABELS.instance}=${instance}`, LABELS.pool] });
  const values: number[] = [];
  for (const c of await docker.listContainers({ filters })) {
    const s = await docker.getContainer(c.Id).stats({ stream: false });
    const cache =
      s.memory_stats.stats?.total_inactive_file ??
      s.memory_stats.stats?.inactive_file ??
      s.memory_stats.stats?.cache ??
      0;
    values.push(mib(s.memory_stats.usage - cache));
  }
  return { n: values.length, mib: values };
}

async function burst(t: TestGateway) {
  await full(t, POOL);
  const t0 = performance.now();
  const results = await Promise.allSettled(Array.from({ length: BURST }, (_, i) => createAndCall(t, i)));
  const wall = performance.now() - t0;
  const ok = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const errors = results.flatMap((r) => (r.status === 'rejected' ? [String((r.reason as Error).message)] : []));
  const refillMs = await full(t, POOL);
  const byStart = (s: string) => ok.filter((r) => r.start === s).map((r) => r.total);
  for (const r of ok) await r.client.deleteRun(r.runId);
  return {
    ok: ok.length,
    failed: errors.length,
    errors: errors.slice(0, 3),
    wallMs: Math.round(wall),
    fromPool: summary(byStart('pool')),
    cold: summary(byStart('cold')),
    all: summary(ok.map((r) => r.total)),
    poolRefilledAfterMs: Math.round(refillMs),
  };
}

async function main() {
  const load = () => os.loadavg().map((x) => Math.round(x * 100) / 100);
  const loadBefore = load();
  const t = await startTestGateway({
    provider: 'docker',
    docker: { ...defaultConfig().docker, image, runtime: RUNTIME },
    limits: { default: LIMITS },
    pool: { size: 2, maxTotal: 2, maxMemoryMb: 64 * 1024, concurrency: 2 },
    tenancy: { default: { createRun: { perSecond: 100, burst: 100 } } },
  });
  try {
    await full(t, 2);
    const memory = await pooledMemory(t.config.instance);
    const pool = await sequential(t, 2);
    // Another class: every run starts cold, with the pool full and quiet beside it.
    const cold = await sequential(t, 2, { ...LIMITS, memoryMb: 640 });
    const dockerRun = await dockerRunBaseline();
    await t.close();
    const b = await startTestGateway({
      provider: 'docker',
      docker: { ...defaultConfig().docker, image, runtime: RUNTIME },
      limits: { default: LIMITS },
      pool: { size: POOL, maxTotal: POOL, maxMemoryMb: 64 * 1024, concurrency: 2 },
      tenancy: { default: { createRun: { perSecond: 100, burst: 100 } } },
    });
    let burstResult;
    try {
      burstResult = await burst(b);
    } finally {
      await b.close();
    }
    writeResult(RUNTIME ? `pool-${RUNTIME}` : 'pool', {
      runtime: RUNTIME || 'runc (engine default)',
      limits: LIMITS,
      loadAverage: { before: loadBefore, after: load() },
      createToFirstAnswer: { pool: pool.createToFirstAnswer, cold: cold.createToFirstAnswer, dockerRunNode: dockerRun },
      createRun: { pool: pool.createRun, cold: cold.createRun },
      starts: { pool: pool.starts, cold: cold.starts },
      idlePooledSandboxMemoryMiB: memory,
      burst: { creates: BURST, poolSize: POOL, ...burstResult },
    });
  } finally {
    await t.close();
  }
}

void main().catch((err) => {
  console.error(err);
  process.exit(1);
});
