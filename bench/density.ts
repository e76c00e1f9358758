/**
 * Paused runs on one host (one command: `bench/run.sh density`): `paused` runs paused and
 * `live` runs live at once, then every one of them resumed in turn with its kernel variable
 * intact (a paused one is paused again after its answer, so the live count stays as it was).
 * The baseline, measured in the same run: the host's memory in use before any run, and with
 * the live runs alone. A paused run holds no process: what it costs is disk.
 * Usage: node dist/bench/density.js [paused=190] [live=10]
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import Docker from 'dockerode';
import { RunState } from '@tether/contract';
import { resultText, type TetherClient } from '../clients/typescript/src';
import { defaultConfig } from '../gateway/src/config';
import { readImagesEnv } from '../gateway/src/sandbox/image';
import { LABELS } from '../gateway/src/sandbox/provider';
import { startTestGateway, type TestGateway } from '../test/helpers/gateway';
import { summary, timeIt, writeResult } from './lib';

const PAUSED = Number(process.argv[2] ?? 190);
const LIVE = Number(process.argv[3] ?? 10);
const ALL = PAUSED + LIVE;
const image = process.env.TETHER_IMAGE || readImagesEnv().TETHER_IMAGE;
if (!image) throw new Error('no runner image: run scripts/setup.sh');
const docker = new Docker();
const LIMITS = { memoryMb: 512, cpuMillis: 1000, pids: 256, diskMb: 256 };
const FEATURES = { eval: true };
const mib = (b: number) => Math.round(b / 2 ** 20);

/** Memory in use on the host (MemTotal − MemAvailable): what runs cost, page cache aside. */
function hostMemoryInUse(): number {
  const info = readFileSync('/proc/meminfo', 'utf8');
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(info)![1]) * 1024;
  return kb('MemTotal') - kb('MemAvailable');
}

async function settledMemory(): Promise<number> {
  await new Promise((r) => setTimeout(r, 5000));
  return hostMemoryInUse();
}

function gateway(stateDir: string): Promise<TestGateway> {
  return startTestGateway({
    provider: 'docker',
    docker: { ...defaultConfig().docker, image },
    stateDir,
    limits: { default: LIMITS },
    pool: { size: 0, maxTotal: 0, maxMemoryMb: 0, concurrency: 1, templates: {} },
    runs: { idlePauseSeconds: 0, maxPerTenant: ALL + 10, maxPausedPerTenant: ALL },
    tenancy: {
      default: {
        liveRuns: LIVE + 2,
        memoryMb: (LIVE + 2) * LIMITS.memoryMb,
        cpuMillis: 100_000,
        diskMb: (ALL + 10) * LIMITS.diskMb,
        createRun: { perSecond: 1000, burst: 1000 },
      },
    },
  });
}

async function evalCell(c: TetherClient, runId: string, code: string): Promise<string> {
  const out = await c.callTool(
    runId,
    'eval',
    { code, description: 'a cell of the density benchmark' },
    { deadlineMs: 300_000 },
  );
  if (out.result.isError) throw new Error(`eval: ${resultText(out.result)}`);
  return resultText(out.result);
}

async function runningContainers(instance: string): Promise<number> {
  const filters = JSON.stringify({ label: [`${LABELS.instance}=${instance}`], status: ['running'] });
  return (await docker.listContainers({ filters })).length;
}

/** Bytes the workspaces' disk images hold on the host (their blocks, not their size). */
function diskImageBytes(dir: string): number {
  let bytes = 0;
  for (const f of readdirSync(dir)) if (f.endsWith('.img')) bytes += statSync(path.join(dir, f)).blocks * 512;
  return bytes;
}

const variable = (i: number) => `v = ${i} * 1000 + 7\nv`;
const expected = (i: number) => String(i * 1000 + 7);

async function main() {
  const load = () => os.loadavg().map((x) => Math.round(x * 100) / 100);
  const loadBefore = load();
  const stateDir = path.join(os.tmpdir(), `tether-density-${process.pid}`);
  const t = await gateway(stateDir);
  const disks = path.join(stateDir, 'disks', t.config.instance);
  const runs: string[] = [];
  try {
    const memoryBefore = await settledMemory();
    const create: number[] = [];
    const pause: number[] = [];
    const stateBytes: number[] = [];
    for (let i = 0; i < ALL; i++) {
      let runId = '';
      create.push(
        await timeIt(async () => {
          const r = await t.alice.createRun({ conversationId: `density-${i}`, features: FEATURES });
          if (r.state !== RunState.READY) throw new Error(`run ${i}: ${r.error}`);
          runId = r.runId;
          await evalCell(t.alice, runId, variable(i));
        }),
      );
      runs.push(runId);
      if (i < PAUSED)
        pause.push(
          await timeIt(async () => {
            const p = await t.alice.pauseRun(runId);
            stateBytes.push(Number(p.pause?.stateBytes ?? 0));
          }),
        );
      if (i === PAUSED - 1) console.error(`${PAUSED} paused`);
    }
    const memoryAll = await settledMemory();
    const containersAll = await runningContainers(t.config.instance);
    const disksAll = diskImageBytes(disks);

    // In turn: every run answers with its own variable; a paused one is paused again after.
    const resume: number[] = [];
    const liveAnswer: number[] = [];
    let intact = 0;
    for (let i = 0; i < ALL; i++) {
      let answer = '';
      const ms = await timeIt(async () => {
        answer = await evalCell(t.alice, runs[i], 'v');
      });
      (i < PAUSED ? resume : liveAnswer).push(ms);
      if (answer.includes(expected(i))) intact++;
      if (i < PAUSED) await t.alice.pauseRun(runs[i]);
    }
    const containersAfter = await runningContainers(t.config.instance);

    // The baseline: the live runs alone, the paused ones gone.
    for (const runId of runs.slice(0, PAUSED)) await t.alice.deleteRun(runId);
    const memoryLiveOnly = await settledMemory();
    writeResult('density', {
      runtime: 'runc (engine default)',
      limits: LIMITS,
      paused: PAUSED,
      live: LIVE,
      hostMemoryInUseMiB: {
        beforeAnyRun: mib(memoryBefore),
        liveRunsOnly: mib(memoryLiveOnly),
        pausedAndLive: mib(memoryAll),
        perPausedRun: Math.round(((memoryAll - memoryLiveOnly) / PAUSED / 2 ** 20) * 100) / 100,
        perLiveRun: Math.round(((memoryLiveOnly - memoryBefore) / LIVE / 2 ** 20) * 10) / 10,
      },
      runningContainers: { pausedAndLive: containersAll, afterEveryResume: containersAfter },
      diskImagesOnHostMiB: { all: mib(disksAll), perRun: Math.round((disksAll / ALL / 2 ** 20) * 10) / 10 },
      stateWrittenPerPauseKiB: summary(stateBytes.map((b) => b / 1024)),
      createToFirstEval: summary(create),
      pause: summary(pause),
      resumeToAnswer: summary(resume),
      liveRunAnswer: summary(liveAnswer),
      answeredWithTheirVariable: `${intact}/${ALL}`,
      loadAverage: { before: loadBefore, after: load() },
    });
  } finally {
    for (const runId of runs) await t.alice.deleteRun(runId).catch(() => undefined);
    await t.close();
  }
}

void main().catch((err) => {
  console.error(err);
  process.exit(1);
});
