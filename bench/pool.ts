/**
 * The warm pool, measured side by side in one run (one command: `bench/run.sh pool`):
 *  1. CreateRun → first tool answer with a claim from a full pool, N runs one after another,
 *     with the gateway's own time per claim step (take, claim record, bind);
 *  2. the same for a cold start (a class the pool does not keep), the pool full and quiet meanwhile;
 *  3. `docker run` of the same image to its first line of output, as the baseline;
 *  4. memory of an idle pooled sandbox (its cgroup: runner + init), prepared and unbound;
 *  5. what warming a kernel or a language server would buy: a claimed run's first and second
 *     eval / lsp answer, and its memory before and after (what a warmed idle sandbox would hold);
 *  6. a burst of B CreateRuns at once from a pool of P: every latency, how many came from the
 *     pool, and how long until the pool is full again;
 *  7. 1–3 again under gVisor when `docker info` lists a runsc runtime.
 * Usage: node dist/bench/pool.js [runs=20] [burst=50] [poolSize=10] [only=claims]
 * (`claims`: 1–4 under runc alone, printed and not written to the results).
 */
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import Docker from 'dockerode';
import { RunStart } from '@tether/contract';
import { resultText } from '../clients/typescript/src';
import { defaultConfig } from '../gateway/src/config';
import type { ClaimSteps } from '../gateway/src/runs/RunRecord';
import { readImagesEnv } from '../gateway/src/sandbox/image';
import { LABELS } from '../gateway/src/sandbox/provider';
import { startTestGateway, type TestGateway } from '../test/helpers/gateway';
import { dockerRunBaseline, dockerRuntimes, summary, timeIt, writeResult } from './lib';

const RUNS = Number(process.argv[2] ?? 20);
const BURST = Number(process.argv[3] ?? 50);
const POOL = Number(process.argv[4] ?? 10);
const ONLY_CLAIMS = process.argv[5] === 'claims';
const docker = new Docker();
const image = process.env.TETHER_IMAGE || readImagesEnv().TETHER_IMAGE;
if (!image) throw new Error('no runner image: run scripts/setup.sh');
const LIMITS = { memoryMb: 512, cpuMillis: 1000, pids: 256, diskMb: 256 };
const mib = (b: number) => Math.round((b / 2 ** 20) * 10) / 10;
const r1 = (x: number) => Math.round(x * 10) / 10;

function gateway(runtime: string, size: number) {
  return startTestGateway({
    provider: 'docker',
    docker: { ...defaultConfig().docker, image, runtime },
    limits: { default: LIMITS },
    pool: { size, maxTotal: size, maxMemoryMb: 64 * 1024, concurrency: 2 },
    tenancy: { default: { createRun: { perSecond: 1000, burst: 1000 } } },
  });
}

const idle = (t: TestGateway) => t.gateway.pool.warm?.stats().classes[0]?.idle ?? 0;
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
  const second = await timeIt(() => client.callTool(r.runId, 'read', { path: 'first.txt' }));
  return {
    secondCall: second,
    runId: r.runId,
    client,
    start: r.start === RunStart.POOL ? 'pool' : 'cold',
    create: t1 - t0,
    total: t2 - t0,
    firstCall: t2 - t1,
  };
}

async function sequential(t: TestGateway, size: number, runs: number, limits?: typeof LIMITS) {
  const total: number[] = [];
  const create: number[] = [];
  const firstCall: number[] = [];
  const secondCall: number[] = [];
  const steps: ClaimSteps[] = [];
  const inGateway: number[] = [];
  const starts: Record<string, number> = {};
  t.gateway.lifecycle.onRunStarted((e) => {
    inGateway.push(e.ms);
    if (e.steps) steps.push(e.steps);
  });
  for (let i = 0; i < runs; i++) {
    await full(t, size); // nothing else going on: the pool is full and quiet
    const r = await createAndCall(t, i, limits);
    total.push(r.total);
    create.push(r.create);
    firstCall.push(r.firstCall);
    secondCall.push(r.secondCall);
    starts[r.start] = (starts[r.start] ?? 0) + 1;
    await r.client.deleteRun(r.runId);
  }
  const step = (k: keyof ClaimSteps) => summary(steps.map((s) => s[k]));
  return {
    starts,
    createToFirstAnswer: summary(total),
    createRun: summary(create),
    firstCall: summary(firstCall),
    secondCall: summary(secondCall),
    createRunInGateway: summary(inGateway.splice(0)),
    ...(steps.length ? { claimSteps: { take: step('take'), record: step('record'), bind: step('bind') } } : {}),
  };
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

/**
 * What warming could buy: a claimed run's first answer needing a Python kernel or a language
 * server against its second, and the run's memory before and after (what a warmed idle sandbox
 * would hold from then on).
 */
async function warmingCost(t: TestGateway, runs: number) {
  const memory = async (runId: string) => {
    const run = t.gateway.runs.get('alice', runId);
    const u = await t.gateway.runs.usage(run);
    return u ? mib(u.memoryBytes) : NaN;
  };
  const out = {
    eval: { first: [] as number[], second: [] as number[], idleMiB: [] as number[], afterMiB: [] as number[] },
    lsp: { first: [] as number[], second: [] as number[], idleMiB: [] as number[], afterMiB: [] as number[] },
  };
  const ts = 'export function area(r: number): number {\n  return Math.PI * r * r;\n}\nexport const a = area(2);\n';
  for (let i = 0; i < runs; i++) {
    await full(t, 2);
    const r = await t.alice.createRun({ conversationId: `warm-${i}`, features: { eval: true, lsp: true } });
    if (r.start !== RunStart.POOL) throw new Error('warming figures need a claimed run');
    await t.alice.putFileMap(r.runId, { 'shapes.ts': ts, 'tsconfig.json': '{"compilerOptions":{"strict":true}}\n' });
    const call = async (tool: string, args: Record<string, unknown>) => {
      const res = await t.alice.callTool(r.runId, tool, args, { deadlineMs: 120_000 });
      if (res.result.isError) throw new Error(`${tool}: ${resultText(res.result)}`);
    };
    const evalArgs = { code: '1 + 1', description: 'time a cell for the benchmark' };
    const lspArgs = { action: 'hover', file: 'shapes.ts', line: 4, symbol: 'area' };
    out.eval.idleMiB.push(await memory(r.runId));
    out.eval.first.push(await timeIt(() => call('eval', evalArgs)));
    out.eval.second.push(await timeIt(() => call('eval', evalArgs)));
    const afterEval = await memory(r.runId);
    out.eval.afterMiB.push(afterEval);
    out.lsp.idleMiB.push(afterEval);
    out.lsp.first.push(await timeIt(() => call('lsp', lspArgs)));
    out.lsp.second.push(await timeIt(() => call('lsp', lspArgs)));
    out.lsp.afterMiB.push(await memory(r.runId));
    await t.alice.deleteRun(r.runId);
  }
  const side = (s: (typeof out)['eval']) => ({
    firstAnswer: summary(s.first),
    secondAnswer: summary(s.second),
    savedByWarmingAtMostMs: r1(summary(s.first).p50 - summary(s.second).p50),
    memoryBeforeMiB: s.idleMiB,
    memoryAfterMiB: s.afterMiB,
    addedMiB: s.afterMiB.map((a, i) => r1(a - s.idleMiB[i])),
  });
  return { pythonKernel: side(out.eval), typescriptServer: side(out.lsp) };
}

/** A claim record written as the gateway writes it, and with an fsync before the rename. */
async function claimRecordWrite(dir: string, n: number) {
  await fs.mkdir(dir, { recursive: true });
  const body = JSON.stringify({
    runId: 'run-x',
    tenant: 't',
    spec: { labels: {} },
    createdAt: new Date().toISOString(),
  });
  const write = async (sync: boolean, i: number) => {
    const final = path.join(dir, `c${i}.json`);
    const tmp = `${final}.tmp`;
    const h = await fs.open(tmp, 'w', 0o600);
    await h.writeFile(body);
    if (sync) await h.sync();
    await h.close();
    await fs.rename(tmp, final);
  };
  const plain: number[] = [];
  const synced: number[] = [];
  for (let i = 0; i < n; i++) {
    plain.push(await timeIt(() => write(false, i)));
    synced.push(await timeIt(() => write(true, i)));
  }
  await fs.rm(dir, { recursive: true, force: true });
  return { renameOnly: summary(plain), fsyncThenRename: summary(synced) };
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

/** Pool, cold and `docker run` under one runtime, interleaved per phase on the same gateway. */
async function sideBySide(runtime: string, runs: number) {
  const t = await gateway(runtime, 2);
  try {
    await full(t, 2);
    await new Promise((r) => setTimeout(r, 500)); // the last start settles
    const memory = await pooledMemory(t.config.instance);
    const pool = await sequential(t, 2, runs);
    // Another class: every run starts cold, with the pool full and quiet beside it.
    const cold = await sequential(t, 2, runs, { ...LIMITS, memoryMb: 640 });
    const dockerRun = await dockerRunBaseline(image!, runtime, runs);
    return {
      runtime: runtime || 'runc (engine default)',
      createToFirstAnswer: {
        pool: pool.createToFirstAnswer,
        cold: cold.createToFirstAnswer,
        dockerRunFirstOutput: dockerRun,
      },
      createRun: { pool: pool.createRun, cold: cold.createRun },
      createRunInGateway: { pool: pool.createRunInGateway, cold: cold.createRunInGateway },
      firstCallAfterCreate: { pool: pool.firstCall, cold: cold.firstCall },
      secondCall: { pool: pool.secondCall, cold: cold.secondCall },
      claimSteps: pool.claimSteps,
      starts: { pool: pool.starts, cold: cold.starts },
      idlePooledSandboxMemoryMiB: memory,
      t,
    };
  } catch (err) {
    await t.close();
    throw err;
  }
}

async function main() {
  const load = () => os.loadavg().map((x) => Math.round(x * 100) / 100);
  const loadBefore = load();
  const { t, ...runc } = await sideBySide('', RUNS);
  if (ONLY_CLAIMS) {
    await t.close();
    console.log(JSON.stringify({ loadAverage: { before: loadBefore, after: load() }, runc }, null, 2));
    return;
  }
  let warming;
  let claimRecord;
  try {
    warming = await warmingCost(t, 3);
    claimRecord = await claimRecordWrite(path.join(t.config.stateDir, 'bench-claims'), 50);
  } finally {
    await t.close();
  }
  const b = await gateway('', POOL);
  let burstResult;
  try {
    burstResult = await burst(b);
  } finally {
    await b.close();
  }
  let runsc: Record<string, unknown> | string = 'no runsc runtime in `docker info`';
  if ((await dockerRuntimes()).includes('runsc')) {
    const { t: g, ...figures } = await sideBySide('runsc', Math.max(5, Math.ceil(RUNS / 2)));
    await g.close();
    runsc = figures;
  }
  writeResult('pool', {
    limits: LIMITS,
    loadAverage: { before: loadBefore, after: load() },
    runc,
    warming,
    claimRecordWrite: claimRecord,
    burst: { creates: BURST, poolSize: POOL, ...burstResult },
    runsc,
  });
}

void main().catch((err) => {
  console.error(err);
  process.exit(1);
});
