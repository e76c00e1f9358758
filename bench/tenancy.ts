/**
 * What tenant fairness costs and buys, measured against the engine, each next to its
 * baseline in the same run:
 *  1. CreateRun with a loop-backed 2 GiB workspace vs a plain volume (docker.disk "none"),
 *     alternating so both see the same machine;
 *  2. write throughput into /workspace (dd, fsync'd) on the loop filesystem vs a plain volume;
 *  3. tenant B's CallTool latency alone, then while tenant A floods CallTool past its rate limit.
 * Usage: node dist/bench/tenancy.js [creates=10] [ddMiB=512]
 *        node dist/bench/tenancy.js flood [--before <another build's dist/gateway/src/cli.js>]
 *          [--provider docker|process]: only 3 (about a minute), written into the same file.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { resultText, TetherClient } from '@tether/client';
import { defaultConfig } from '../gateway/src/config';
import { readImagesEnv } from '../gateway/src/sandbox/image';
import { LoopDisks } from '../gateway/src/sandbox/loopDisk';
import { startTestGateway, type TestGateway } from '../test/helpers/gateway';
import { containerOf, execIn } from '../test/integration/docker/support';
import { machine, summary, timeIt, writeResult } from './lib';

const args = process.argv.slice(2);
const FLOOD_ONLY = args[0] === 'flood';
const option = (name: string) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const CREATES = FLOOD_ONLY ? 0 : Number(args[0] ?? 10);
const DD_MIB = FLOOD_ONLY ? 0 : Number(args[1] ?? 512);
const FLOOD_SECONDS = 8;
const image = process.env.TETHER_IMAGE || readImagesEnv().TETHER_IMAGE;
if (!image && !(FLOOD_ONLY && option('--provider') === 'process'))
  throw new Error('no runner image: run scripts/setup.sh');

const gateway = (disk: 'loop' | 'none', tenancy?: object) =>
  startTestGateway({
    provider: 'docker',
    docker: { ...defaultConfig().docker, image, disk },
    ...(tenancy ? { tenancy } : {}),
  } as never);

async function createCost(loop: TestGateway, plain: TestGateway) {
  const ms = { loop: [] as number[], plain: [] as number[] };
  for (let i = 0; i < CREATES; i++) {
    for (const [name, t] of [
      ['loop', loop],
      ['plain', plain],
    ] as const) {
      let runId = '';
      ms[name].push(
        await timeIt(async () => {
          const r = await t.alice.createRun({ conversationId: `c${i}` });
          if (r.error) throw new Error(r.error);
          runId = r.runId;
        }),
      );
      await t.alice.deleteRun(runId);
    }
  }
  return { loopMs: summary(ms.loop), plainMs: summary(ms.plain) };
}

/** MiB/s of a dd into the run's workspace, written through and fsync'd. */
async function ddRate(_t: TestGateway, runId: string): Promise<number> {
  const c = await containerOf(runId);
  const start = performance.now();
  const res = await execIn(c, ['dd', 'if=/dev/zero', 'of=/workspace/dd.bin', 'bs=1M', `count=${DD_MIB}`, 'conv=fsync']);
  const s = (performance.now() - start) / 1000;
  if (res.exitCode !== 0) throw new Error(res.stderr);
  await execIn(c, ['rm', '/workspace/dd.bin']);
  return Math.round((DD_MIB / s) * 10) / 10;
}

async function writeThroughput(loop: TestGateway, plain: TestGateway) {
  const a = await loop.alice.createRun({ conversationId: 'dd' });
  const b = await plain.alice.createRun({ conversationId: 'dd' });
  const rates = { loop: [] as number[], plain: [] as number[] };
  for (let i = 0; i < 3; i++) {
    rates.loop.push(await ddRate(loop, a.runId));
    rates.plain.push(await ddRate(plain, b.runId));
  }
  await loop.alice.deleteRun(a.runId);
  await plain.alice.deleteRun(b.runId);
  const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
  return {
    loopMiBps: rates.loop,
    plainMiBps: rates.plain,
    loopMedian: median(rates.loop),
    plainMedian: median(rates.plain),
  };
}

/**
 * A gateway in a child process (`tether serve`), so that neither B's client nor A's flood runs
 * on the event loop under test; `cli` may be another build's, to compare two in one run.
 * Audit log and metrics are on, as in production: what a refusal costs includes them.
 */
async function childGateway(cli: string, provider: string, aRate: { perSecond: number; burst: number }) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-bench-flood-'));
  const config = {
    listen: '127.0.0.1:0',
    tokens: { 'token-alice': 'alice', 'token-bob': 'bob' },
    provider,
    allowProcessProvider: true,
    instance: `bench-flood-${process.pid}-${path.basename(dir)}`,
    stateDir: dir,
    ...(image ? { docker: { image } } : {}),
    pool: { size: 0 },
    metrics: { listen: '127.0.0.1:0' },
    audit: { path: path.join(dir, 'audit.log') },
    tenancy: { tenants: { alice: { callTool: aRate } } },
  };
  writeFileSync(path.join(dir, 'config.json'), JSON.stringify(config));
  const child = spawn(
    process.execPath,
    [
      ...(process.env.BENCH_GATEWAY_NODE_ARGS ?? '').split(' ').filter(Boolean),
      cli,
      'serve',
      '--config',
      path.join(dir, 'config.json'),
    ],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, TETHER_LOG_LEVEL: 'warn' },
      cwd: dir,
    },
  );
  let err = '';
  const address = await new Promise<string>((resolve, reject) => {
    child.stderr.on('data', (d: Buffer) => {
      err += d;
      const m = /tether listening on (\S+)/.exec(err);
      if (m) resolve(m[1]);
    });
    child.once('exit', (code) => reject(new Error(`gateway exited ${code}: ${err}`)));
  });
  const alice = new TetherClient(address, 'token-alice');
  const bob = new TetherClient(address, 'token-bob');
  return {
    address,
    alice,
    bob,
    auditBytes: () => statSync(config.audit.path, { throwIfNoEntry: false })?.size ?? 0,
    /** The gateway process's CPU time so far (user + system), ms. */
    cpuMs: () => {
      const f = readFileSync(`/proc/${child.pid}/stat`, 'utf8').split(') ')[1].split(' ');
      return ((Number(f[11]) + Number(f[12])) * 1000) / 100;
    },
    async close() {
      alice.close();
      bob.close();
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const round = (x: number, digits = 3) => Math.round(x * 10 ** digits) / 10 ** digits;

type Flood = { mode: 'rate' | 'loops'; n: number };

/**
 * The niceness A's flooding process runs at: a platform's flood comes from other machines, but
 * here it shares the gateway's two cores, so at normal priority it measures the machine, not the
 * gateway. BENCH_FLOOD_NICE=0 floods at normal priority.
 */
const FLOOD_NICE = Number(process.env.BENCH_FLOOD_NICE ?? 19);

/** A's flood in its own process, for as long as B needs; its counts when it ended. */
function startFlood(address: string, runId: string, f: Flood) {
  const child = spawn(
    process.execPath,
    [path.join(__dirname, 'flood.js'), address, 'token-alice', runId, f.mode, String(f.n), '600'],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  if (child.pid && FLOOD_NICE) os.setPriority(child.pid, FLOOD_NICE);
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d));
  return async () => {
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    return JSON.parse(out) as Record<string, number>;
  };
}

/**
 * Tenant B's sequential reads for FLOOD_SECONDS alone, then during each of A's floods (A is
 * limited to 20 calls/s, so nearly all of its calls are refused).
 */
async function floodPhases(cli: string, provider: string, floods: Flood[]) {
  const t = await childGateway(cli, provider, { perSecond: 20, burst: 20 });
  try {
    const a = await t.alice.createRun({ conversationId: 'flood', limits: { diskMb: 64 } });
    const b = await t.bob.createRun({ conversationId: 'calm', limits: { diskMb: 64 } });
    if (a.error || b.error) throw new Error(a.error || b.error);
    await t.alice.putFileMap(a.runId, { 'f.txt': 'a\n' });
    await t.bob.putFileMap(b.runId, { 'f.txt': 'b\n' });
    let bRefused = 0;
    const bCall = async () => {
      const out = await t.bob.callTool(b.runId, 'read', { path: 'f.txt' }).catch(() => void bRefused++);
      if (out?.result.isError) throw new Error(resultText(out.result));
    };
    const bFor = async (seconds: number) => {
      const ms: number[] = [];
      const until = performance.now() + seconds * 1000;
      while (performance.now() < until) ms.push(await timeIt(bCall));
      return summary(ms);
    };
    await bFor(2);
    const cpu0 = t.cpuMs();
    const alone = await bFor(FLOOD_SECONDS);
    const cpuPerBCall = (t.cpuMs() - cpu0) / alone.n;
    const out: Record<string, unknown> = {
      bAloneMs: alone,
      gatewayCpuMsPerBCall: round(cpuPerBCall),
    };
    // What one refused call costs the gateway, B idle: its CPU over a flood of 200 in flight.
    {
      const stop = startFlood(t.address, a.runId, { mode: 'loops', n: 200 });
      const cpuStart = t.cpuMs();
      const began = performance.now();
      const counts = await new Promise((r) => setTimeout(r, 4000)).then(stop);
      const cpu = t.cpuMs() - cpuStart;
      const aCalls = counts.answered + counts.refused + counts.other;
      out.refusalCostBIdle = {
        a: counts,
        gatewayCpuShareOfOneCore: round(cpu / (performance.now() - began)),
        gatewayCpuMsPerACall: round(cpu / aCalls, 4),
      };
      await new Promise((r) => setTimeout(r, 500));
    }
    for (const f of floods) {
      const stop = startFlood(t.address, a.runId, f);
      const cpuStart = t.cpuMs();
      const began = performance.now();
      await new Promise((r) => setTimeout(r, 1000));
      const audit0 = t.auditBytes();
      const bMs = await bFor(FLOOD_SECONDS);
      const auditBytes = t.auditBytes() - audit0;
      const counts = await stop();
      const cpu = t.cpuMs() - cpuStart;
      const seconds = (performance.now() - began) / 1000;
      const aCalls = counts.answered + counts.refused + counts.other;
      out[f.mode === 'rate' ? `aAt${f.n}PerSecond` : `a${f.n}InFlight`] = {
        bDuringFloodMs: bMs,
        a: counts,
        auditBytesPerSecondDuringFlood: Math.round(auditBytes / FLOOD_SECONDS),
        // The gateway's CPU over the flood, less what B's calls cost alone: what each of
        // A's calls (nearly all refused) cost the gateway's one thread.
        gatewayCpuShareOfOneCore: round(cpu / 1000 / seconds),
        gatewayCpuMs: round(cpu),
        gatewayCpuMsPerACall: round((cpu - bMs.n * cpuPerBCall) / aCalls, 4),
      };
      await new Promise((r) => setTimeout(r, 500));
    }
    out.bRefused = bRefused;
    return out;
  } finally {
    await t.close();
  }
}

async function floodIsolation(provider: string, beforeCli?: string) {
  const floods: Flood[] = [
    { mode: 'rate', n: 2000 },
    { mode: 'loops', n: 200 },
  ];
  const cli = path.resolve(__dirname, '../gateway/src/cli.js');
  return {
    description: `tenant B: sequential reads for ${FLOOD_SECONDS} s alone, then for ${FLOOD_SECONDS} s during each flood of tenant A (A limited to 20/s, burst 20; the flood offered open loop at 2000 calls/s, then closed loop with 200 calls in flight, its process at nice ${FLOOD_NICE}); gateway in its own process with audit log and metrics on, provider ${provider}`,
    ...(beforeCli ? { before: await floodPhases(path.resolve(beforeCli), provider, floods) } : {}),
    after: await floodPhases(cli, provider, floods),
  };
}

/** The disk steps alone: image, mkfs, loop device; and their release. */
async function diskSteps() {
  const disks = new LoopDisks(path.join(os.tmpdir(), `tether-bench-disks-${process.pid}`, 'bench'));
  const create: number[] = [];
  const release: number[] = [];
  for (let i = 0; i < CREATES; i++) {
    let disk!: Awaited<ReturnType<LoopDisks['create']>>;
    create.push(await timeIt(async () => (disk = await disks.create(`bench-${i}`, 2048, { uid: 1000, gid: 1000 }))));
    release.push(await timeIt(() => disks.release(disk)));
  }
  return { createMs: summary(create), releaseMs: summary(release) };
}

const RESULTS = path.resolve(__dirname, '../../bench/results/tenancy.json');

async function floodOnly() {
  const flood = { machine: machine(), ...(await floodIsolation(option('--provider') ?? 'docker', option('--before'))) };
  const doc = JSON.parse(readFileSync(RESULTS, 'utf8')) as { results: Record<string, unknown> };
  doc.results.rateLimitIsolation = flood;
  writeFileSync(RESULTS, `${JSON.stringify(doc, null, 2)}\n`);
  console.log(JSON.stringify(flood, null, 2));
}

async function main() {
  if (FLOOD_ONLY) return floodOnly();
  const steps = await diskSteps();
  const loop = await gateway('loop');
  const plain = await gateway('none');
  let create, write;
  try {
    for (const t of [loop, plain]) await t.alice.deleteRun((await t.alice.createRun({ conversationId: 'warm' })).runId);
    create = await createCost(loop, plain);
    write = await writeThroughput(loop, plain);
  } finally {
    await loop.close();
    await plain.close();
  }
  const flood = { machine: machine(), ...(await floodIsolation('docker')) };
  writeResult('tenancy', {
    image,
    createRun: {
      description: `CreateRun (ready to call), ${CREATES} each, alternating: a 2 GiB loop-backed ext4 workspace vs a plain volume`,
      ...create,
    },
    diskSteps: {
      description: 'LoopDisks alone, 2 GiB: sparse file + mkfs.ext4 + debugfs + losetup; release = losetup -d + rm',
      ...steps,
    },
    writeThroughput: {
      description: `dd ${DD_MIB} MiB bs=1M conv=fsync into /workspace, 3 times each, loop ext4 (discard) vs a plain volume (overlay2 host ext4)`,
      ...write,
    },
    rateLimitIsolation: flood,
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
