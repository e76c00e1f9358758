/**
 * Per-run containers, measured:
 *  1. cold start: CreateRun → first tool call answered, over N runs one after another, with
 *     `docker run` of the same image (the CLI, end to end) measured in the same run as the baseline;
 *  2. memory of an idle run (the container's cgroup: runner + init) and how many idle runs fit;
 *  3. tool-call round trip through a container versus through the `process` provider.
 * Usage: node dist/bench/containers.js [coldRuns=30] [idleRuns=10] [calls=2000]
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import * as os from 'node:os';
import { promisify } from 'node:util';
import Docker from 'dockerode';
import { resultText } from '../clients/typescript/src';
import { defaultConfig } from '../gateway/src/config';
import { readImagesEnv } from '../gateway/src/sandbox/image';
import { LABELS } from '../gateway/src/sandbox/provider';
import { startTestGateway, type TestGateway } from '../test/helpers/gateway';
import { summary, timeIt, writeResult } from './lib';

const COLD = Number(process.argv[2] ?? 30);
const IDLE = Number(process.argv[3] ?? 10);
const CALLS = Number(process.argv[4] ?? 2000);
const run = promisify(execFile);
const docker = new Docker();
const image = process.env.TETHER_IMAGE || readImagesEnv().TETHER_IMAGE;
if (!image) throw new Error('no runner image: run scripts/setup.sh');

const mib = (b: number) => Math.round((b / 2 ** 20) * 10) / 10;

async function dockerGateway(): Promise<TestGateway> {
  return startTestGateway({ provider: 'docker', docker: { ...defaultConfig().docker, image } });
}

async function coldStarts(t: TestGateway) {
  const total: number[] = [];
  const create: number[] = [];
  const firstCall: number[] = [];
  for (let i = 0; i < COLD; i++) {
    const t0 = performance.now();
    const r = await t.alice.createRun({ conversationId: `cold-${i}` });
    const t1 = performance.now();
    if (r.error) throw new Error(r.error);
    const out = await t.alice.callTool(r.runId, 'write', { path: 'first.txt', content: 'first\n' });
    const t2 = performance.now();
    if (out.result.isError) throw new Error(resultText(out.result));
    total.push(t2 - t0);
    create.push(t1 - t0);
    firstCall.push(t2 - t1);
    await t.alice.deleteRun(r.runId);
  }
  return { total, create, firstCall };
}

async function dockerRunBaseline() {
  const trueRun: number[] = [];
  const nodeRun: number[] = [];
  const args = ['run', '--rm', '--network', 'none', '--log-driver', 'none', '--label', 'dev.tether.bench=true'];
  for (let i = 0; i < COLD; i++) {
    trueRun.push(await timeIt(() => run('docker', [...args, '--entrypoint', 'true', image!])));
    nodeRun.push(await timeIt(() => run('docker', [...args, '--entrypoint', 'node', image!, '-e', '0'])));
  }
  return { trueRun, nodeRun };
}

/** The memory a container's cgroup holds, page cache excluded (what `docker stats` shows). */
async function containerMemory(id: string): Promise<number> {
  const s = await docker.getContainer(id).stats({ stream: false });
  const cache =
    s.memory_stats.stats?.total_inactive_file ??
    s.memory_stats.stats?.inactive_file ??
    s.memory_stats.stats?.cache ??
    0;
  return s.memory_stats.usage - cache;
}

async function idleMemory(t: TestGateway) {
  const gatewayBefore = process.memoryUsage().rss;
  const runs = [];
  for (let i = 0; i < IDLE; i++) {
    const r = await t.alice.createRun({ conversationId: `idle-${i}` });
    await t.alice.callTool(r.runId, 'read', { path: 'missing.txt' });
    runs.push(r.runId);
  }
  await new Promise((r) => setTimeout(r, 5000));
  const perRun: number[] = [];
  for (const runId of runs) {
    const [c] = await docker.listContainers({ filters: JSON.stringify({ label: [`${LABELS.runId}=${runId}`] }) });
    perRun.push(await containerMemory(c.Id));
  }
  global.gc?.();
  const gatewayDelta = process.memoryUsage().rss - gatewayBefore;
  for (const runId of runs) await t.alice.deleteRun(runId);
  const meminfo = readFileSync('/proc/meminfo', 'utf8');
  const available = Number(/MemAvailable:\s+(\d+) kB/.exec(meminfo)?.[1] ?? 0) * 1024;
  const s = summary(perRun.map(mib));
  const each = s.p95 * 2 ** 20 + Math.max(0, gatewayDelta / IDLE);
  return {
    idleRuns: IDLE,
    containerMiB: s,
    gatewayRssGrowthForAllIdleRunsMiB: mib(gatewayDelta),
    hostMemAvailableGiB: Math.round((available / 2 ** 30) * 10) / 10,
    idleRunsThatFit: Math.floor((available * 0.9) / each),
    runsThatFitAtDefaultLimit: Math.floor((available * 0.9) / (defaultConfig().limits.default.memoryMb * 2 ** 20)),
    note: 'fit = 90% of MemAvailable now / (p95 idle container + gateway share); the second figure reserves each run its default memory limit',
  };
}

async function roundTrips(t: TestGateway) {
  const r = await t.alice.createRun({ conversationId: 'rtt' });
  await t.alice.putFileMap(r.runId, { 'bench.txt': 'hello\n' });
  const once = async () => {
    const out = await t.alice.callTool(r.runId, 'read', { path: 'bench.txt' });
    if (out.result.isError) throw new Error(resultText(out.result));
  };
  for (let i = 0; i < 200; i++) await once();
  const seq: number[] = [];
  for (let i = 0; i < CALLS; i++) seq.push(await timeIt(once));
  // Throughput: CALLS calls, 50 in flight.
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: 50 }, async () => {
      while (next++ < CALLS) await once();
    }),
  );
  const callsPerSecond = Math.round(CALLS / ((performance.now() - t0) / 1000));
  await t.alice.deleteRun(r.runId);
  return { sequentialMs: summary(seq), concurrent50CallsPerSecond: callsPerSecond };
}

async function main() {
  const t = await dockerGateway();
  let cold, baseline, idle, dockerRtt;
  try {
    // One unmeasured run first: the image's layers into the page cache.
    const warm = await t.alice.createRun({ conversationId: 'warm' });
    await t.alice.deleteRun(warm.runId);
    cold = await coldStarts(t);
    baseline = await dockerRunBaseline();
    idle = await idleMemory(t);
    dockerRtt = await roundTrips(t);
  } finally {
    await t.close();
  }
  const p = await startTestGateway({ provider: 'process' });
  let processRtt;
  try {
    processRtt = await roundTrips(p);
  } finally {
    await p.close();
  }
  writeResult('containers', {
    image,
    imageSizeGB: Math.round(((await docker.getImage(image).inspect()).Size / 1e9) * 100) / 100,
    hostCpus: os.cpus().length,
    coldStart: {
      description: `CreateRun → first tool call (write) answered, ${COLD} runs one after another, docker provider`,
      totalMs: summary(cold.total),
      createRunMs: summary(cold.create),
      firstCallMs: summary(cold.firstCall),
      baselineDockerRunTrueMs: summary(baseline.trueRun),
      baselineDockerRunNodeMs: summary(baseline.nodeRun),
      baselineNote:
        '`docker run --rm --network none --log-driver none` of the same image via the CLI: `--entrypoint true`, and `node -e 0`',
    },
    idleMemory: idle,
    roundTrip: {
      description: `read of a 1-line file over loopback gRPC, ${CALLS} sequential calls after 200 warm-up, then ${CALLS} calls with 50 in flight`,
      docker: dockerRtt,
      process: processRtt,
    },
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
