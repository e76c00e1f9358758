/**
 * What tenant fairness costs and buys, measured against the engine, each next to its
 * baseline in the same run:
 *  1. CreateRun with a loop-backed 2 GiB workspace vs a plain volume (docker.disk "none"),
 *     alternating so both see the same machine;
 *  2. write throughput into /workspace (dd, fsync'd) on the loop filesystem vs a plain volume;
 *  3. tenant B's CallTool latency alone, then while tenant A floods CallTool past its rate limit.
 * Usage: node dist/bench/tenancy.js [creates=10] [ddMiB=512] [bCalls=300]
 */
import { spawn } from 'node:child_process';
import * as os from 'node:os';
import * as path from 'node:path';
import { resultText } from '../gateway/src/client';
import { defaultConfig } from '../gateway/src/config';
import { readImagesEnv } from '../gateway/src/sandbox/image';
import { LoopDisks } from '../gateway/src/sandbox/loopDisk';
import { startTestGateway, type TestGateway } from '../test/helpers/gateway';
import { containerOf, execIn } from '../test/integration/docker/support';
import { summary, timeIt, writeResult } from './lib';

const CREATES = Number(process.argv[2] ?? 10);
const DD_MIB = Number(process.argv[3] ?? 512);
const B_CALLS = Number(process.argv[4] ?? 300);
const image = process.env.TETHER_IMAGE || readImagesEnv().TETHER_IMAGE;
if (!image) throw new Error('no runner image: run scripts/setup.sh');

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

/** B's sequential reads while A floods from 32 loops, with A's CallTool rate as given. */
async function floodPhase(aRate: { perSecond: number; burst: number } | undefined) {
  const tenancy = { default: {}, tenants: aRate ? { alice: { callTool: aRate } } : {}, admission: { concurrency: 8 } };
  const t = await gateway('loop', tenancy);
  try {
    const a = await t.alice.createRun({ conversationId: 'flood', limits: { diskMb: 64 } });
    const b = await t.bob.createRun({ conversationId: 'calm', limits: { diskMb: 64 } });
    await t.alice.putFileMap(a.runId, { 'f.txt': 'a\n' });
    await t.bob.putFileMap(b.runId, { 'f.txt': 'b\n' });
    const bCall = async () => {
      const out = await t.bob.callTool(b.runId, 'read', { path: 'f.txt' });
      if (out.result.isError) throw new Error(resultText(out.result));
    };
    for (let i = 0; i < 50; i++) await bCall();
    const alone: number[] = [];
    for (let i = 0; i < B_CALLS; i++) alone.push(await timeIt(bCall));
    // The flood runs in its own process: its client's CPU is not the gateway's.
    const child = spawn(
      process.execPath,
      [path.join(__dirname, 'flood.js'), t.gateway.address, 'token-alice', a.runId, '32', '600'],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d));
    await new Promise((r) => setTimeout(r, 1000));
    const during: number[] = [];
    let bRefused = 0;
    const floodStart = performance.now();
    for (let i = 0; i < B_CALLS; i++) during.push(await timeIt(() => bCall().catch(() => void bRefused++)));
    const floodSeconds = (performance.now() - floodStart) / 1000 + 1;
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    const counts = JSON.parse(out) as { answered: number; refused: number; other: number };
    return {
      aRateLimit: aRate ?? 'default (1000/s, burst 5000)',
      bAloneMs: summary(alone),
      bDuringFloodMs: summary(during),
      bRefusedDuringFlood: bRefused,
      aAnswered: counts.answered,
      aRefused: counts.refused,
      aAttemptsPerSecond: Math.round((counts.answered + counts.refused) / floodSeconds),
    };
  } finally {
    await t.close();
  }
}

async function floodIsolation() {
  return {
    description: `tenant B: ${B_CALLS} sequential reads alone, then while tenant A runs 32 loops of reads; once with A limited to 20/s, once with A at the default rate (the baseline: what the flood costs B when nothing refuses it)`,
    aLimited: await floodPhase({ perSecond: 20, burst: 20 }),
    aUnlimited: await floodPhase(undefined),
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

async function main() {
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
  const flood = await floodIsolation();
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
