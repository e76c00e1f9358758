/**
 * Pause, resume and fork at each depth, side by side in one run with their baselines
 * (one command: `bench/run.sh lifecycle`). The run: a Python kernel holding a 100 MB DataFrame,
 * pyright up on a small project. For each runtime (runc, and runsc where `docker info` lists it)
 * and each depth its engine allows (portable everywhere; memory under runsc on an engine whose
 * checkpoint API is on, `runs.memoryPause` on and off):
 *  1. baselines: a cold CreateRun to its first `eval` answer, `docker run` of the image to its
 *     first output, and the kernel loading the same DataFrame from a pickle in /tmp, warm and as a
 *     new kernel (started, pandas imported);
 *  2. `cycles` times: PauseRun (its time and the state it wrote; the run's containers after it),
 *     then a call that resumes the run to its first answer (the DataFrame's sum), the second
 *     answer, and pyright's first answer after the resume (it starts again) and its second;
 *  3. ForkRun of `forks` from the live run until every fork has answered `eval` with the DataFrame.
 * Beside the resumes and the fork, the CPU time the whole machine spent on them (/proc/stat):
 * divided by the cores, the least wall time that work could take on this machine.
 * Usage: node dist/bench/lifecycle.js [cycles=5] [forks=10]
 */
import * as os from 'node:os';
import Docker from 'dockerode';
import { PauseDepth, RunState } from '@tether/contract';
import { resultText, type TetherClient } from '../clients/typescript/src';
import { defaultConfig } from '../gateway/src/config';
import { readImagesEnv } from '../gateway/src/sandbox/image';
import { checkpointSupport } from '../gateway/src/sandbox/dockerCheckpoints';
import { LABELS } from '../gateway/src/sandbox/provider';
import { startTestGateway, type TestGateway } from '../test/helpers/gateway';
import { dockerRunBaseline, dockerRuntimes, machineBusyMs, summary, timeIt, writeResult } from './lib';

const CYCLES = Number(process.argv[2] ?? 5);
const FORKS = Number(process.argv[3] ?? 10);
const image = process.env.TETHER_IMAGE || readImagesEnv().TETHER_IMAGE;
if (!image) throw new Error('no runner image: run scripts/setup.sh');
const docker = new Docker();
const LIMITS = { memoryMb: 1024, cpuMillis: 2000, pids: 512, diskMb: 1024 };
const FEATURES = { eval: true, lsp: true };
// 1,310,720 rows of ten float64 columns: 100 MiB of data.
const DATAFRAME =
  'import numpy as np, pandas as pd\ndf = pd.DataFrame(np.arange(13_107_200, dtype="float64").reshape(-1, 10))\nint(df.sum().sum())';
const CHECK = 'int(df.sum().sum())';
const PROJECT = {
  'pyproject.toml': '[project]\nname = "shapes"\nversion = "0.1.0"\n',
  'shapes/__init__.py': '',
  'shapes/area.py': 'import math\n\n\ndef area(r: float) -> float:\n    return math.pi * r * r\n',
  'main.py': 'from shapes.area import area\n\nprint(area(2.0))\n',
};
const HOVER = { action: 'hover', file: 'main.py', line: 3, symbol: 'area' };
const mib = (b: number) => Math.round((b / 2 ** 20) * 10) / 10;

function gateway(runtime: string, memoryPause: boolean): Promise<TestGateway> {
  const quota = { liveRuns: FORKS + 4, memoryMb: (FORKS + 4) * LIMITS.memoryMb, cpuMillis: 100_000 };
  return startTestGateway({
    provider: 'docker',
    docker: { ...defaultConfig().docker, image, runtime },
    limits: { default: LIMITS },
    runs: { idlePauseSeconds: 0, maxForks: FORKS, memoryPause },
    tenancy: {
      default: { ...quota, diskMb: (FORKS + 4) * LIMITS.diskMb, createRun: { perSecond: 1000, burst: 1000 } },
    },
  });
}

async function call(c: TetherClient, runId: string, tool: string, args: Record<string, unknown>): Promise<string> {
  const out = await c.callTool(runId, tool, args, { deadlineMs: 300_000 });
  if (out.result.isError) throw new Error(`${tool}: ${resultText(out.result)}`);
  return resultText(out.result);
}
const evalCell = (c: TetherClient, runId: string, code: string) =>
  call(c, runId, 'eval', { code, description: 'a cell of the lifecycle benchmark' });

async function containersOf(runId: string): Promise<number> {
  const filters = JSON.stringify({ label: [`${LABELS.runId}=${runId}`] });
  return (await docker.listContainers({ all: true, filters })).length;
}

/** A cold CreateRun to its first eval answer, and `docker run` to its first line. */
async function baselines(t: TestGateway, runtime: string, n: number) {
  const cold: number[] = [];
  for (let i = 0; i < n; i++) {
    let runId = '';
    cold.push(
      await timeIt(async () => {
        const r = await t.alice.createRun({ conversationId: `cold-${i}`, features: FEATURES });
        if (r.state !== RunState.READY) throw new Error(r.error);
        runId = r.runId;
        await evalCell(t.alice, runId, '1 + 1');
      }),
    );
    await t.alice.deleteRun(runId);
  }
  return { coldCreateToFirstEval: summary(cold), dockerRunFirstOutput: await dockerRunBaseline(image!, runtime, n) };
}

/** The run every figure is taken on: the DataFrame in its kernel, pyright answering. */
async function preparedRun(
  t: TestGateway,
): Promise<{ runId: string; sum: string; kernelLoad: unknown; newKernelLoad: unknown }> {
  const r = await t.alice.createRun({ conversationId: 'lifecycle', features: FEATURES });
  if (r.state !== RunState.READY) throw new Error(r.error);
  await t.alice.putFileMap(r.runId, PROJECT);
  const sum = await evalCell(t.alice, r.runId, DATAFRAME);
  await call(t.alice, r.runId, 'lsp', HOVER);
  // What the kernel alone takes to read the same data back: part of the portable target.
  await evalCell(t.alice, r.runId, 'df.to_pickle("/tmp/df.pkl")');
  const load: number[] = [];
  for (let i = 0; i < 3; i++)
    load.push(await timeIt(() => evalCell(t.alice, r.runId, 'int(pd.read_pickle("/tmp/df.pkl").shape[0])')));
  // And a new kernel doing the same (what a portable resume's kernel has to do too: start and
  // import pandas); it leaves the DataFrame in the kernel, as it was.
  const fresh: number[] = [];
  for (let i = 0; i < 3; i++)
    fresh.push(
      await timeIt(() =>
        call(t.alice, r.runId, 'eval', {
          code: 'import pandas as pd\ndf = pd.read_pickle("/tmp/df.pkl")\nint(df.shape[0])',
          description: 'a new kernel reads the DataFrame back',
          reset: true,
        }),
      ),
    );
  await evalCell(t.alice, r.runId, 'import os\nos.remove("/tmp/df.pkl")');
  return { runId: r.runId, sum, kernelLoad: summary(load), newKernelLoad: summary(fresh) };
}

async function cycles(t: TestGateway, runId: string, sum: string, n: number) {
  const depths = new Set<number>();
  const pause: number[] = [];
  const stateMiB: number[] = [];
  const containersWhilePaused: number[] = [];
  const resumeToFirstAnswer: number[] = [];
  const resumeCpu: number[] = [];
  const secondAnswer: number[] = [];
  const lspFirst: number[] = [];
  const lspSecond: number[] = [];
  for (let i = 0; i < n; i++) {
    let bytes = 0;
    pause.push(
      await timeIt(async () => {
        const p = await t.alice.pauseRun(runId);
        bytes = Number(p.pause?.stateBytes ?? 0);
        depths.add(p.pause?.depth ?? 0);
      }),
    );
    stateMiB.push(mib(bytes));
    containersWhilePaused.push(await containersOf(runId));
    let first = '';
    const busyBefore = machineBusyMs();
    resumeToFirstAnswer.push(
      await timeIt(async () => {
        first = await evalCell(t.alice, runId, CHECK);
      }),
    );
    resumeCpu.push(machineBusyMs() - busyBefore);
    if (!first.includes(sum.trim())) throw new Error(`the DataFrame did not come back: ${first}`);
    secondAnswer.push(await timeIt(() => evalCell(t.alice, runId, CHECK)));
    lspFirst.push(await timeIt(() => call(t.alice, runId, 'lsp', HOVER)));
    lspSecond.push(await timeIt(() => call(t.alice, runId, 'lsp', HOVER)));
  }
  return {
    depthsReported: [...depths].map((d) =>
      d === PauseDepth.MEMORY ? 'memory' : d === PauseDepth.PORTABLE ? 'portable' : d,
    ),
    pause: summary(pause),
    stateWrittenMiB: stateMiB,
    containersWhilePaused,
    resumeToFirstAnswer: summary(resumeToFirstAnswer),
    resumeMachineCpuMs: summary(resumeCpu),
    secondAnswerAfterResume: summary(secondAnswer),
    lspFirstAnswerAfterResume: summary(lspFirst),
    lspSecondAnswerAfterResume: summary(lspSecond),
  };
}

/** ForkRun of `n`, until each fork has answered with the DataFrame. */
async function fork(t: TestGateway, runId: string, sum: string, n: number) {
  const t0 = performance.now();
  const busyBefore = machineBusyMs();
  const forks = await t.alice.forkRun(runId, n);
  const forkRun = performance.now() - t0;
  const answers = await Promise.all(forks.map((f) => evalCell(t.alice, f.runId, CHECK)));
  const total = performance.now() - t0;
  const busy = machineBusyMs() - busyBefore;
  const kept = answers.filter((a) => a.includes(sum.trim())).length;
  for (const f of forks) await t.alice.deleteRun(f.runId);
  return {
    forks: n,
    ready: forks.filter((f) => f.state === RunState.READY).length,
    withTheDataFrame: kept,
    forkRunMs: Math.round(forkRun),
    allAnsweredMs: Math.round(total),
    machineCpuMs: busy,
    leastWallOnTheseCoresMs: Math.round(busy / os.cpus().length),
  };
}

/** One depth under one runtime: its own gateway (`runs.memoryPause` says which depth). */
async function measure(runtime: string, depth: 'portable' | 'memory', withBaselines: boolean) {
  const t = await gateway(runtime, depth === 'memory');
  try {
    const base = withBaselines ? await baselines(t, runtime, CYCLES) : {};
    const run = await preparedRun(t);
    const cycle = await cycles(t, run.runId, run.sum, CYCLES);
    const forked = await fork(t, run.runId, run.sum, FORKS);
    await t.alice.deleteRun(run.runId);
    return {
      runtime: runtime || 'runc (engine default)',
      depth,
      ...base,
      kernelLoadsTheDataFrame: run.kernelLoad,
      newKernelLoadsTheDataFrame: run.newKernelLoad,
      ...cycle,
      fork: forked,
    };
  } finally {
    await t.close();
  }
}

async function main() {
  const load = () => os.loadavg().map((x) => Math.round(x * 100) / 100);
  const loadBefore = load();
  const runc = await measure('', 'portable', true);
  let runsc: unknown = 'no runsc runtime in `docker info`';
  let memory: unknown = 'no runsc runtime in `docker info`';
  if ((await dockerRuntimes()).includes('runsc')) {
    runsc = await measure('runsc', 'portable', true);
    const support = await checkpointSupport(docker, 'runsc');
    memory = support.ok ? await measure('runsc', 'memory', false) : `no memory depth here: ${support.why}`;
  }
  const version = (await docker.info()) as { Runtimes?: Record<string, { path?: string }> };
  writeResult('lifecycle', {
    limits: LIMITS,
    cycles: CYCLES,
    loadAverage: { before: loadBefore, after: load() },
    runscBinary: version.Runtimes?.runsc?.path,
    runc,
    runsc,
    runscMemory: memory,
  });
}

void main().catch((err) => {
  console.error(err);
  process.exit(1);
});
