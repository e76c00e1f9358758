/**
 * eval through tether next to a Jupyter kernel, in one run of this program so both share the
 * machine's state:
 *  - round trip of a trivial cell (`1+1`) through gRPC → gateway → runner → kernel → back,
 *    p50/p99, for the Python and the JavaScript kernel;
 *  - the same cell on ipykernel driven by jupyter_client (bench/eval_jupyter.py, Debian's
 *    python3-ipykernel and python3-jupyter-client on the host);
 *  - rendering: a 100k-row DataFrame echoed as a table, and a matplotlib figure as a PNG, both
 *    through tether and on the Jupyter kernel (HTML/text repr and the inline backend's PNG).
 * Usage: node dist/bench/eval.js [samples] [provider]
 */
import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import { resultText } from '../clients/typescript/src';
import { startTestGateway, type TestGateway } from '../test/helpers/gateway';
import { summary, timeIt, writeResult } from './lib';

const SAMPLES = Number(process.argv[2] ?? 200);
const PROVIDER = (process.argv[3] ?? process.env.TETHER_TEST_PROVIDER ?? 'process') as 'process' | 'docker';
const RENDER_SAMPLES = Math.max(10, Math.floor(SAMPLES / 10));
const HOST_PYTHON = '/usr/bin/python3';

const SETUP =
  'import numpy as np, pandas as pd, matplotlib.pyplot as plt\ndf = pd.DataFrame(np.random.rand(100_000, 5), columns=list("abcde"))';
const FIGURE = 'plt.plot(np.arange(1000), np.sin(np.arange(1000) / 50)); plt.title("sine")';

async function cell(t: TestGateway, runId: string, code: string, language = 'python'): Promise<number> {
  let failed = '';
  const ms = await timeIt(async () => {
    const r = await t.alice.callTool(runId, 'eval', { code, language, description: 'time one cell for the benchmark' });
    if (r.result.isError) failed = resultText(r.result);
  });
  if (failed) throw new Error(`cell failed: ${failed}`);
  return ms;
}

async function samples(n: number, fn: () => Promise<number>, warmup = 3): Promise<number[]> {
  for (let i = 0; i < warmup; i++) await fn();
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push(await fn());
  return out;
}

async function main(): Promise<void> {
  const t = await startTestGateway({
    provider: PROVIDER,
    runner: { eval: PROVIDER === 'docker' ? {} : { python: HOST_PYTHON } },
  });
  try {
    const run = await t.alice.createRun({ features: { eval: true } });
    if (run.error) throw new Error(run.error);
    const firstPython = await cell(t, run.runId, '1+1');
    const firstJs = await cell(t, run.runId, '1+1', 'javascript');
    await cell(t, run.runId, SETUP);
    const trivial = await samples(SAMPLES, () => cell(t, run.runId, '1+1'));
    const trivialJs = await samples(SAMPLES, () => cell(t, run.runId, '1+1', 'javascript'));
    const dataframe = await samples(RENDER_SAMPLES, () => cell(t, run.runId, 'df'));
    const figure = await samples(RENDER_SAMPLES, () => cell(t, run.runId, FIGURE));
    await t.alice.deleteRun(run.runId);

    let jupyterOut: string;
    try {
      jupyterOut = execFileSync(
        HOST_PYTHON,
        [path.resolve(__dirname, '../../bench/eval_jupyter.py'), String(SAMPLES)],
        {
          encoding: 'utf8',
          // The kernel spec runs "python3": Debian's, which has ipykernel, must come first on PATH.
          env: { ...process.env, PATH: `/usr/bin:/bin:${process.env.PATH}`, PYDEVD_DISABLE_FILE_VALIDATION: '1' },
          stdio: ['ignore', 'pipe', 'pipe'],
          maxBuffer: 16 * 1024 * 1024,
        },
      );
    } catch (err) {
      const stderr = String((err as { stderr?: string }).stderr ?? '')
        .trim()
        .split('\n')
        .slice(-3)
        .join('\n');
      throw new Error(
        `the Jupyter baseline failed (needs apt-get install python3-ipykernel python3-jupyter-client python3-pandas python3-matplotlib):\n${stderr}`,
      );
    }
    const jupyter = JSON.parse(jupyterOut) as Record<'trivial' | 'dataframe100k' | 'figure', number[]>;

    writeResult(`eval-${PROVIDER}`, {
      provider: PROVIDER,
      note: 'milliseconds from the client sending the cell to the complete result. tether: gRPC → gateway → runner → kernel; jupyter: jupyter_client → ZMQ → ipykernel, on the host.',
      kernelStartMs: { python: Math.round(firstPython), javascript: Math.round(firstJs) },
      trivialCell: {
        tether: summary(trivial),
        tetherJavascript: summary(trivialJs),
        jupyter: summary(jupyter.trivial),
      },
      dataframe100kRows: { tether: summary(dataframe), jupyter: summary(jupyter.dataframe100k) },
      figurePng: { tether: summary(figure), jupyter: summary(jupyter.figure) },
    });
  } finally {
    await t.close();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
