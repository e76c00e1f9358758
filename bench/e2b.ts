/**
 * E2B's JavaScript SDK against tether's own client, on one gateway, interleaved:
 * - create → first command answer, from the warm pool: `Sandbox.create()` + `commands.run('true')`
 *   against CreateRun + StartProcess of `true`;
 * - a trivial command round trip through the SDK (`commands.run('true')`) against tether's own
 *   trivial `read` through its own client, against StartProcess of `true` (the floor of any
 *   command: a process spawned in the sandbox), and against StartProcess of what the SDK sends
 *   (`/bin/bash -l -c true`), which leaves the SDK's and the E2B surface's own cost.
 * Needs the SDK installed in test/integration/e2b/js (its test installs it from its lockfile).
 * Usage: node dist/bench/e2b.js [creates] [calls] [repeats]
 */
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { create } from '@bufbuild/protobuf';
import { StartProcessRequestSchema } from '@tether/contract';
import { startTestGateway, type TestGateway } from '../test/helpers/gateway';
import { summary, timeIt, writeResult } from './lib';

const CREATES = Number(process.argv[2] ?? 10);
const CALLS = Number(process.argv[3] ?? 200);
const REPEATS = Number(process.argv[4] ?? 3);
const KEY = `e2b_${'c3'.repeat(20)}`;

interface SdkSandbox {
  sandboxId: string;
  commands: { run(cmd: string): Promise<{ exitCode: number }> };
  kill(): Promise<void>;
}

async function sdk(): Promise<{ create(opts?: object): Promise<SdkSandbox> }> {
  const dir = path.resolve(__dirname, '../../test/integration/e2b/js/node_modules/e2b/dist/index.mjs');
  // The SDK is an ES module; a compiled `import()` would become `require()`.
  const importEsm = new Function('specifier', 'return import(specifier)') as (s: string) => Promise<unknown>;
  const mod = (await importEsm(pathToFileURL(dir).href)) as { Sandbox: { create(opts?: object): Promise<SdkSandbox> } };
  return mod.Sandbox;
}

/** Runs a command through tether's own client and waits for its end. */
async function ownCommand(t: TestGateway, runId: string, cmd = 'true', args: string[] = []): Promise<void> {
  for await (const e of t.alice.startProcess(create(StartProcessRequestSchema, { runId, cmd, args }))) {
    if (e.event.case === 'end') {
      if (e.event.value.exitCode !== 0) throw new Error('true failed');
      return;
    }
  }
}

async function main() {
  const t = await startTestGateway({
    tokens: { 'token-alice': 'alice', [KEY]: 'alice' },
    http: { listen: '127.0.0.1:0' },
    pool: { size: 2 },
  });
  process.env.E2B_API_URL = process.env.E2B_SANDBOX_URL = `http://${t.gateway.httpAddress}`;
  process.env.E2B_API_KEY = KEY;
  const Sandbox = await sdk();
  const features = { eval: true, commands: true };
  const waitPool = () => new Promise((r) => setTimeout(r, 4000));
  try {
    const sdkCreate: number[] = [];
    const ownCreate: number[] = [];
    for (let i = 0; i < CREATES; i++) {
      await waitPool();
      let sbx: SdkSandbox | undefined;
      sdkCreate.push(
        await timeIt(async () => {
          sbx = await Sandbox.create();
          await sbx.commands.run('true');
        }),
      );
      await sbx?.kill();
      await waitPool();
      let runId = '';
      ownCreate.push(
        await timeIt(async () => {
          runId = (await t.alice.createRun({ conversationId: 'bench', features })).runId;
          await ownCommand(t, runId);
        }),
      );
      await t.alice.deleteRun(runId);
    }

    const sbx = await Sandbox.create();
    const run = await t.alice.createRun({ conversationId: 'bench', features });
    await t.alice.putFileMap(run.runId, { 'bench.txt': 'hello\n' });
    const rounds: Record<string, number[]>[] = [];
    for (let r = 0; r < REPEATS; r++) {
      const sdkRun: number[] = [];
      const ownRead: number[] = [];
      const ownProc: number[] = [];
      const ownBash: number[] = [];
      for (let i = 0; i < CALLS; i++) {
        sdkRun.push(await timeIt(() => sbx.commands.run('true')));
        ownRead.push(await timeIt(() => t.alice.callTool(run.runId, 'read', { path: 'bench.txt' })));
        ownProc.push(await timeIt(() => ownCommand(t, run.runId)));
        // What the SDK sends for commands.run(cmd): a login shell around it.
        ownBash.push(await timeIt(() => ownCommand(t, run.runId, '/bin/bash', ['-l', '-c', 'true'])));
      }
      rounds.push({ sdkRun, ownRead, ownProc, ownBash });
    }
    await sbx.kill();
    await t.alice.deleteRun(run.runId);

    const s = (x: number[]) => summary(x.slice(Math.min(20, Math.floor(x.length / 10))));
    const sc = summary(sdkCreate);
    const oc = summary(ownCreate);
    const perRound = rounds.map((r) => {
      const a = s(r.sdkRun!);
      const b = s(r.ownRead!);
      const c = s(r.ownProc!);
      const d = s(r.ownBash!);
      const ratio = (x: number, y: number) => Math.round((x / y) * 100) / 100;
      return {
        sdkCommandMs: a,
        tetherReadMs: b,
        tetherStartProcessTrueMs: c,
        tetherStartProcessLoginShellMs: d,
        ratioSdkCommandToReadP50: ratio(a.p50, b.p50),
        ratioStartProcessTrueToReadP50: ratio(c.p50, b.p50),
        ratioSdkCommandToSameStartProcessP50: ratio(a.p50, d.p50),
      };
    });
    writeResult('e2b', {
      description: `E2B's JS SDK (e2b 2.51.0) against tether's own client on one gateway (docker provider, warm pool of 2): ${CREATES} interleaved creates → first command answer each (4 s between creates for the pool to refill), then ${REPEATS} rounds of ${CALLS} calls interleaved one by one (the first tenth of each round left out as warm-up)`,
      createToFirstCommand: {
        sdkMs: sc,
        tetherClientMs: oc,
        ratioP50: Math.round((sc.p50 / oc.p50) * 100) / 100,
        target: '≤ 1.5',
      },
      trivialCommand: { rounds: perRound, target: 'SDK command ≤ 2× tether read (p50)' },
    });
  } finally {
    await t.close();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
