/**
 * Language servers through tether, per language (TypeScript, Python, C, Go), all in one run of
 * this program so the baselines share the machine's state:
 *  - overhead: p50 of `lsp definition` / `lsp references` through gRPC → gateway → runner →
 *    server, next to the same request sent straight to the same warm server of the same run
 *    (the runner's `lsp probe` command times the bare server round trip);
 *  - diagnostics on write: a `write` with the wrap (lsp on) next to the same write in a run
 *    without it (lsp off);
 *  - cold start: run creation + files, then the first answer of the fresh server.
 * A trivial `read` in the same run gives the floor every tool call pays, so the overhead can be
 * split into that floor and what the lsp tool itself adds.
 * Usage: node dist/bench/lsp.js [samples] [provider]
 */
import * as os from 'node:os';
import { Approval } from '@tether/contract';
import { ProbeCommand, type ProbeParams } from '../protocol/src/lsp';
import { fixture } from '../test/integration/lsp/helpers';
import { startTestGateway, type TestGateway } from '../test/helpers/gateway';
import { summary, timeIt, writeResult } from './lib';

const SAMPLES = Number(process.argv[2] ?? 40);
const PROVIDER = (process.argv[3] ?? process.env.TETHER_TEST_PROVIDER ?? 'process') as 'process' | 'docker';

interface Case {
  language: string;
  fixture: string;
  definition: { file: string; line: number; symbol: string };
  references: { file: string; line: number; symbol: string };
  write: { path: string; content: (i: number) => string };
}

const CASES: Case[] = [
  {
    language: 'typescript',
    fixture: 'ts',
    definition: { file: 'src/main.ts', line: 3, symbol: 'Circle' },
    references: { file: 'src/shapes.ts', line: 21, symbol: 'totalArea' },
    write: { path: 'src/calc.ts', content: (i) => `export const n${i % 2}: number = ${i};\n` },
  },
  {
    language: 'python',
    fixture: 'py',
    definition: { file: 'geometry/main.py', line: 3, symbol: 'Circle' },
    references: { file: 'geometry/shapes.py', line: 19, symbol: 'total_area' },
    write: { path: 'geometry/calc.py', content: (i) => `n${i % 2}: int = ${i}\n` },
  },
  {
    language: 'c',
    fixture: 'c',
    definition: { file: 'main.c', line: 6, symbol: 'circle_area' },
    references: { file: 'main.c', line: 6, symbol: 'circle_area' },
    write: { path: 'calc.c', content: (i) => `int n${i % 2} = ${i};\n` },
  },
  {
    language: 'go',
    fixture: 'go',
    definition: { file: 'use.go', line: 8, symbol: 'TotalArea' },
    references: { file: 'shapes.go', line: 21, symbol: 'TotalArea' },
    write: { path: 'calc.go', content: (i) => `package geometry\n\nvar N${i % 2} = ${i}\n` },
  },
];

async function call(t: TestGateway, runId: string, tool: string, args: Record<string, unknown>): Promise<void> {
  const r = await t.alice.callTool(runId, tool, args);
  if (r.result.isError) throw new Error(`${tool} ${JSON.stringify(args)}: ${JSON.stringify(r.result.content)}`);
}

async function samples(n: number, fn: () => Promise<unknown>): Promise<number[]> {
  for (let i = 0; i < 5; i++) await fn();
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push(await timeIt(fn));
  return out;
}

async function measure(t: TestGateway, c: Case): Promise<Record<string, unknown>> {
  const files = fixture(c.fixture);
  const t0 = process.hrtime.bigint();
  const run = await t.alice.createRun({ features: { lsp: true }, approvals: { write: Approval.AUTO } });
  await t.alice.putFileMap(run.runId, files);
  const ready = Number(process.hrtime.bigint() - t0) / 1e6;
  const firstAnswer = await timeIt(() => call(t, run.runId, 'lsp', { action: 'definition', ...c.definition }));
  const runner = t.gateway.runs.ready('alice', run.runId).runner;
  const direct = async (method: ProbeParams['method'], at: Case['definition']) => {
    const r = await runner.command(ProbeCommand.type, { ...at, method, count: 1 });
    return r.samplesMs[0];
  };
  // The floor every tool call pays (gRPC, gateway, runner stdio): a read of a one-line file.
  await t.alice.putFileMap(run.runId, { 'floor.txt': 'x\n' });
  // Rounds interleave the floor, the tool and the bare server, so a load spike on this shared
  // machine hits all three alike instead of one block of samples.
  const s = {
    floor: [] as number[],
    definition: [] as number[],
    definitionDirect: [] as number[],
    references: [] as number[],
    referencesDirect: [] as number[],
  };
  for (let round = -5; round < SAMPLES; round++) {
    const floor = await timeIt(() => call(t, run.runId, 'read', { path: 'floor.txt' }));
    const def = await timeIt(() => call(t, run.runId, 'lsp', { action: 'definition', ...c.definition }));
    const defDirect = await direct('textDocument/definition', c.definition);
    const refs = await timeIt(() => call(t, run.runId, 'lsp', { action: 'references', ...c.references }));
    const refsDirect = await direct('textDocument/references', c.references);
    if (round < 0) continue;
    s.floor.push(floor);
    s.definition.push(def);
    s.definitionDirect.push(defDirect);
    s.references.push(refs);
    s.referencesDirect.push(refsDirect);
  }
  const floor = summary(s.floor);
  const r3 = (x: number) => Math.round(x * 1000) / 1000;
  const overhead: Record<string, unknown> = { trivialReadCall: floor };
  for (const [action, through, bare] of [
    ['definition', summary(s.definition), summary(s.definitionDirect)],
    ['references', summary(s.references), summary(s.referencesDirect)],
  ] as const) {
    overhead[action] = {
      throughTether: through,
      directToServer: bare,
      p50AddedMs: r3(through.p50 - bare.p50),
      p50Ratio: Math.round((through.p50 / bare.p50) * 100) / 100,
      // What the lsp tool itself adds beyond the call floor and the server's own time.
      p50ToolMs: r3(through.p50 - floor.p50 - bare.p50),
    };
  }
  let i = 0;
  const withWrap = summary(
    await samples(Math.ceil(SAMPLES / 2), () =>
      call(t, run.runId, 'write', { path: c.write.path, content: c.write.content(i++) }),
    ),
  );
  await t.alice.deleteRun(run.runId);

  const plain = await t.alice.createRun({ features: { lsp: false }, approvals: { write: Approval.AUTO } });
  await t.alice.putFileMap(plain.runId, files);
  const withoutWrap = summary(
    await samples(Math.ceil(SAMPLES / 2), () =>
      call(t, plain.runId, 'write', { path: c.write.path, content: c.write.content(i++) }),
    ),
  );
  await t.alice.deleteRun(plain.runId);
  return {
    coldStart: {
      runCreatedWithFilesMs: Math.round(ready),
      firstDefinitionMs: Math.round(firstAnswer),
      totalMs: Math.round(ready + firstAnswer),
    },
    overhead,
    writeDiagnostics: { withWrap, withoutWrap, p50AddedMs: Math.round((withWrap.p50 - withoutWrap.p50) * 1000) / 1000 },
  };
}

async function main() {
  const t = await startTestGateway({ provider: PROVIDER });
  const results: Record<string, unknown> = {
    provider: PROVIDER,
    samples: SAMPLES,
    loadAverageBefore: os.loadavg().map((x) => Math.round(x * 100) / 100),
  };
  try {
    for (const c of CASES) {
      console.error(`measuring ${c.language}…`);
      results[c.language] = await measure(t, c);
    }
  } finally {
    await t.close();
  }
  results.loadAverageAfter = os.loadavg().map((x) => Math.round(x * 100) / 100);
  writeResult(`lsp-${PROVIDER}`, results);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
