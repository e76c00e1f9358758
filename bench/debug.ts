/**
 * The debug tool through tether next to the same adapter driven directly, in the same run:
 *  - launch-to-first-stop per adapter (debugpy, lldb-dap, delve): `debug launch` returning a
 *    breakpoint stop (gRPC → gateway → runner → adapter, with adapter detection and the stop's
 *    location) vs spawn + initialize + launch + breakpoint + configurationDone + `stopped` with
 *    a bare DAP client started inside the same sandbox (bench/debugDirect.ts);
 *  - latency of `stack` and `variables` on the stopped program vs bare stackTrace / variables.
 * Usage: node dist/bench/debug.js [launches] [samples] [provider]
 */
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { startTestGateway, type TestGateway } from '../test/helpers/gateway';
import { debugRun, fixture, type DebugRun } from '../test/integration/debug/helpers';
import { summary, timeIt, writeResult } from './lib';

const LAUNCHES = Number(process.argv[2] ?? 5);
const SAMPLES = Number(process.argv[3] ?? 30);
const PROVIDER = (process.argv[4] ?? process.env.TETHER_TEST_PROVIDER ?? 'process') as 'process' | 'docker';

interface Case {
  adapter: string;
  program: string;
  file: string;
  line: number;
}

const CASES: Case[] = [
  { adapter: 'debugpy', program: 'py/app.py', file: 'py/app.py', line: 12 },
  { adapter: 'lldb', program: 'c/prog', file: 'c/prog.c', line: 17 },
  { adapter: 'delve', program: 'go', file: 'go/main.go', line: 19 },
];

async function throughTether(
  d: DebugRun,
  c: Case,
): Promise<{ launchMs: number[]; stackMs: number[]; variablesMs: number[] }> {
  const launchMs: number[] = [];
  const stackMs: number[] = [];
  const variablesMs: number[] = [];
  await d.ok({ op: 'breakpoints', file: c.file, lines: [c.line] });
  for (let i = 0; i < LAUNCHES; i++) {
    let stopped: any;
    launchMs.push(
      await timeIt(async () => (stopped = await d.ok({ op: 'launch', program: c.program, wait_seconds: 120 }))),
    );
    if (stopped.structured.state !== 'stopped') throw new Error(`${c.adapter} did not stop: ${stopped.text}`);
    let frameId = 0;
    for (let s = 0; s < SAMPLES; s++)
      stackMs.push(await timeIt(async () => (frameId = (await d.ok({ op: 'stack' })).structured.frames[0].id)));
    const ref = (await d.ok({ op: 'scopes', frame_id: frameId })).structured.scopes[0].reference;
    for (let s = 0; s < SAMPLES; s++) variablesMs.push(await timeIt(() => d.ok({ op: 'variables', reference: ref })));
    await d.ok({ op: 'terminate' });
  }
  await d.ok({ op: 'breakpoints', file: c.file, lines: [] });
  return { launchMs, stackMs, variablesMs };
}

async function direct(
  t: TestGateway,
  d: DebugRun,
  c: Case,
): Promise<{ launchMs: number[]; stackMs: number[]; variablesMs: number[] }> {
  const docker = t.config.provider === 'docker';
  const root = docker ? '/workspace' : path.join(t.config.stateDir, 'workspaces', d.runId);
  const dist = docker ? '/opt/tether/dist' : path.resolve(__dirname, '..');
  const argv = [
    'node',
    'bench-direct.js',
    dist,
    c.adapter,
    path.join(root, c.program),
    path.join(root, c.file),
    String(c.line),
    String(LAUNCHES),
    String(SAMPLES),
  ];
  return JSON.parse(await d.exec(argv));
}

const stat = (xs: number[]) => summary(xs);

(async () => {
  const t = await startTestGateway({ provider: PROVIDER });
  const results: Record<string, unknown> = { provider: PROVIDER, launches: LAUNCHES, samples: SAMPLES };
  try {
    const d = await debugRun(t, 'bench', {
      ...fixture('python', 'py'),
      ...fixture('c', 'c'),
      ...fixture('go', 'go'),
      'bench-direct.js': readFileSync(path.join(__dirname, 'debugDirect.js'), 'utf8'),
    });
    await d.exec(['gcc', '-g', '-O0', '-o', 'c/prog', 'c/prog.c']);
    // The first Go build fills the build cache; neither side should pay for it.
    await d.ok({ op: 'launch', program: 'go', wait_seconds: 120 });
    await d.call({ op: 'terminate' });
    for (const c of CASES) {
      const viaTether = await throughTether(d, c);
      const bare = await direct(t, d, c);
      const row = {
        launchToFirstStop: { tether: stat(viaTether.launchMs), direct: stat(bare.launchMs) },
        stack: { tether: stat(viaTether.stackMs), direct: stat(bare.stackMs) },
        variables: { tether: stat(viaTether.variablesMs), direct: stat(bare.variablesMs) },
      };
      results[c.adapter] = row;
      console.error(
        `${c.adapter}: launch p50 ${row.launchToFirstStop.tether.p50} vs ${row.launchToFirstStop.direct.p50} ms; stack p50 ${row.stack.tether.p50} vs ${row.stack.direct.p50}; variables p50 ${row.variables.tether.p50} vs ${row.variables.direct.p50}`,
      );
    }
    await t.alice.deleteRun(d.runId).catch(() => undefined);
  } finally {
    await t.close();
  }
  writeResult(`debug-${PROVIDER}`, results);
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
