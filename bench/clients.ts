/**
 * A call's cost as each client sees it, from one gateway start to the next: a trivial `read`
 * and an lsp `hover` from the TypeScript, Python and Go clients, on the shared Calls stream and
 * with one CallTool stream per call, each against the gateway's health check from the same
 * client on the same connection. Every start is a new gateway process (docker provider, runc,
 * its default warm pool) with one run; each client is its own process (bench/clients/driver.*),
 * and the order of the clients turns from one start to the next.
 * Usage: node dist/bench/clients.js [starts] [rounds]   (or `npm run bench -- clients`)
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { TetherClient, waitUntilServing } from '../clients/typescript/src';
import { fixture } from '../test/integration/lsp/helpers';
import { HOVER, CONTENDERS, type Samples } from './clients/shape';
import { percentile, writeResult } from './lib';

const STARTS = Number(process.argv[2] ?? 10);
const ROUNDS = Number(process.argv[3] ?? 300);
const WARM = 50;
const ROOT = path.resolve(__dirname, '../..');
const TOKEN = 'token-bench';
const exec = promisify(execFile);
const r2 = (x: number) => Math.round(x * 100) / 100;

type Lang = 'typescript' | 'python' | 'go';
const LANGS: Lang[] = ['typescript', 'python', 'go'];

/** The command that runs each client's driver, built or installed once. */
async function drivers(): Promise<Record<Lang, string[]>> {
  const setup = await exec('bash', [path.join(ROOT, 'scripts/clients-setup.sh')], { cwd: ROOT, maxBuffer: 64 << 20 });
  const venv = setup.stdout.trim().split('\n').pop() as string;
  const goBin = path.join(ROOT, '.tether/bench/clients-go');
  await exec('go', ['build', '-o', goBin, '.'], {
    cwd: path.join(ROOT, 'bench/clients/go'),
    env: { ...process.env, PATH: `/usr/local/go/bin:${process.env.PATH}` },
  });
  return {
    typescript: [process.execPath, path.join(ROOT, 'dist/bench/clients/driver.js')],
    python: [path.join(ROOT, venv, 'bin/python'), path.join(ROOT, 'bench/clients/driver.py')],
    go: [goBin],
  };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

interface Gateway {
  address: string;
  process: ChildProcess;
  dir: string;
}

/** A gateway process of its own, as `tether serve` starts it. */
async function startGateway(start: number): Promise<Gateway> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-bench-clients-'));
  const address = `127.0.0.1:${await freePort()}`;
  const config = {
    listen: address,
    provider: 'docker',
    instance: `bench-clients-${process.pid}-${start}`,
    stateDir: path.join(dir, 'state'),
    tokens: { [TOKEN]: 'bench' },
    docker: { image: process.env.TETHER_IMAGE },
    tenancy: { default: { callTool: { perSecond: 1_000_000, burst: 1_000_000 } } },
  };
  writeFileSync(path.join(dir, 'config.json'), JSON.stringify(config));
  const child = spawn(
    process.execPath,
    [path.join(ROOT, 'dist/gateway/src/cli.js'), 'serve', '--config', path.join(dir, 'config.json')],
    {
      stdio: ['ignore', 'ignore', 'inherit'],
      env: { ...process.env, TETHER_LOG_LEVEL: 'warn' },
    },
  );
  await waitUntilServing(address, 60_000);
  return { address, process: child, dir };
}

async function stopGateway(g: Gateway): Promise<void> {
  const exited = new Promise((r) => g.process.once('exit', r));
  g.process.kill('SIGTERM');
  await exited;
  rmSync(g.dir, { recursive: true, force: true });
}

async function drive(cmd: string[], address: string, runId: string): Promise<Samples> {
  const [file, ...args] = cmd;
  const out = await exec(file, [...args, address, TOKEN, runId, String(ROUNDS), String(WARM)], {
    cwd: ROOT,
    maxBuffer: 64 << 20,
    timeout: 30 * 60_000,
  });
  const samples = JSON.parse(out.stdout) as Samples;
  for (const k of CONTENDERS)
    if (samples[k]?.length !== ROUNDS)
      throw new Error(`${file}: ${k} has ${samples[k]?.length} samples, not ${ROUNDS}`);
  return samples;
}

interface StartFigures {
  healthP50: number;
  readCallsP50: number;
  readCallToolP50: number;
  hoverCallsP50: number;
  hoverCallToolP50: number;
  readCalls: number;
  readCallTool: number;
  hoverCalls: number;
  hoverCallTool: number;
}

function figures(s: Samples): StartFigures {
  const p = (k: keyof Samples) => percentile(s[k], 50);
  const health = p('health');
  return {
    healthP50: r2(health),
    readCallsP50: r2(p('readCalls')),
    readCallToolP50: r2(p('readCallTool')),
    hoverCallsP50: r2(p('hoverCalls')),
    hoverCallToolP50: r2(p('hoverCallTool')),
    readCalls: r2(p('readCalls') / health),
    readCallTool: r2(p('readCallTool') / health),
    hoverCalls: r2(p('hoverCalls') / health),
    hoverCallTool: r2(p('hoverCallTool') / health),
  };
}

const spread = (xs: number[]) => ({
  median: r2(percentile(xs, 50)),
  min: r2(Math.min(...xs)),
  max: r2(Math.max(...xs)),
});

async function main() {
  const began = Date.now();
  const loadBefore = os.loadavg();
  const cmds = await drivers();
  const perStart: Record<Lang, StartFigures[]> = { typescript: [], python: [], go: [] };
  for (let start = 0; start < STARTS; start++) {
    const g = await startGateway(start);
    const client = new TetherClient(g.address, TOKEN);
    try {
      const run = await client.createRun({ conversationId: 'bench-clients', features: { lsp: true } });
      if (run.error) throw new Error(run.error);
      await client.putFileMap(run.runId, { ...fixture('ts'), 'bench.txt': 'hello\n' });
      // The language server is up before any client times a hover.
      const warm = await client.callTool(run.runId, 'lsp', HOVER);
      if (warm.result.isError) throw new Error(`hover: ${warm.text}`);
      const order = LANGS.map((_, i) => LANGS[(i + start) % LANGS.length]);
      for (const lang of order) {
        const f = figures(await drive(cmds[lang], g.address, run.runId));
        perStart[lang].push(f);
        console.error(
          `start ${start + 1} ${lang}: read/health ${f.readCalls}× (CallTool ${f.readCallTool}×), health ${f.healthP50} ms`,
        );
      }
      await client.deleteRun(run.runId);
    } finally {
      client.close();
      await stopGateway(g);
    }
  }
  const report = Object.fromEntries(
    LANGS.map((lang) => {
      const starts = perStart[lang];
      const callsLimit = lang === 'typescript' ? 1.5 : 2;
      const of = (k: keyof StartFigures) => spread(starts.map((s) => s[k]));
      return [
        lang,
        {
          readCallsRatio: of('readCalls'),
          readCallToolRatio: of('readCallTool'),
          hoverCallsRatio: of('hoverCalls'),
          hoverCallToolRatio: of('hoverCallTool'),
          healthP50Ms: of('healthP50'),
          readCallsP50Ms: of('readCallsP50'),
          hoverCallsP50Ms: of('hoverCallsP50'),
          targets: {
            callsAtMost: callsLimit,
            startsOverCallsTarget: starts.filter((s) => s.readCalls > callsLimit).length,
            callToolAtMost: 3,
            startsOverCallToolTarget: starts.filter((s) => s.readCallTool > 3).length,
          },
          perStart: starts,
        },
      ];
    }),
  );
  writeResult('clients', {
    description: `per gateway start (a new \`tether serve\` process, docker provider, runc, default warm pool), each client in its own process: ${ROUNDS} rounds after ${WARM} warm-up, each round timing health, read on the shared Calls stream, read on its own CallTool stream, and the same two for an lsp hover (TypeScript server); ratios are p50 ÷ the same client's health p50 on the same connection`,
    starts: STARTS,
    rounds: ROUNDS,
    loadAverageBefore: loadBefore,
    loadAverageAfter: os.loadavg(),
    seconds: Math.round((Date.now() - began) / 1000),
    clients: report,
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
