/**
 * What a call costs inside the runner process alone: the runner started as the process
 * provider starts it, reached over its Unix socket as the gateway reaches it, with no gateway
 * in between. Each round makes a `runner/ping` (the JSON-RPC round trip and nothing else), a
 * trivial `read` and a `read` four directories down, on every runner given, so the difference
 * of p50s is what the call adds in the runner and runners built from different commits are
 * compared under the same load. The runners' own CPU time per call comes from the schedstat of each of their threads
 * over blocks of calls of one kind. With `--lsp`, the lsp tool's `definition` and `references`
 * against the same warm server asked directly (`lsp/probe`; needs typescript-language-server).
 *
 * Usage: node dist/bench/runner-call.js [calls] [--lsp] [--hold] [--only=ping|read]
 *   TETHER_RUNNER_ENTRIES: `name=/path/to/runner/src/main.js,...` (default: this build's runner).
 *   TETHER_RUNNER_NODE_ARGS: extra node flags for the runners (`--cpu-prof --cpu-prof-dir=…`).
 *   --hold: after warm-up, print the first runner's pid and wait for a line on stdin (strace -p).
 *   --only=ping|read: after warm-up (and hold), make [calls] calls of that kind on the first
 *     runner only, then wait for a line again (with --hold) and stop.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { createMessageConnection, type MessageConnection } from 'vscode-jsonrpc/node';
import { ProbeCommand, type ProbeParams } from '../protocol/src/lsp';
import { CommandRequest, InitializeRequest, ShutdownRequest } from '../protocol/src/run';
import { CallToolRequest, type CallToolReply } from '../protocol/src/tools';
import { PingRequest } from '../protocol/src/transport';
import { connectSocket } from '../gateway/src/runs/connection/channel';
import { bootRunner } from '../gateway/src/sandbox/boot';
import { runnerEntry } from '../gateway/src/sandbox/process';
import { fixture } from '../test/integration/lsp/helpers';
import { summary, timeIt } from './lib';

const args = process.argv.slice(2);
const CALLS = Number(args.find((a) => /^\d+$/.test(a)) ?? 3000);
const LSP = args.includes('--lsp');
const HOLD = args.includes('--hold');
const ONLY = args.find((a) => a.startsWith('--only='))?.slice('--only='.length);
const DEEP = 'src/a/b/c/bench.txt';

const r3 = (x: number) => Math.round(x * 1000) / 1000;
/** A process's CPU time so far, every thread's, in ms (schedstat counts in ns, stat in 10 ms ticks). */
function cpuMs(pid: number): number {
  let ns = 0;
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // A thread that ended meanwhile: its time is lost to this figure, a few µs at most.
    }
  }
  return ns / 1e6;
}

const line = () => new Promise((resolve) => process.stdin.once('data', resolve));

interface Runner {
  name: string;
  pid: number;
  proc: ChildProcess;
  workspace: string;
  sockets: string;
  c: MessageConnection;
  close(): void;
  ping(): Promise<unknown>;
  call(tool: string, a: Record<string, unknown>): Promise<CallToolReply>;
}

async function start(name: string, entry: string): Promise<Runner> {
  const workspace = mkdtempSync(path.join(os.tmpdir(), 'tether-runner-bench-'));
  const sockets = mkdtempSync(path.join(os.tmpdir(), 'tether-runner-sock-'));
  writeFileSync(path.join(workspace, 'bench.txt'), 'hello\n');
  mkdirSync(path.dirname(path.join(workspace, DEEP)), { recursive: true });
  writeFileSync(path.join(workspace, DEEP), 'hello\n');
  if (LSP) {
    for (const [rel, text] of Object.entries(fixture('ts'))) {
      mkdirSync(path.dirname(path.join(workspace, rel)), { recursive: true });
      writeFileSync(path.join(workspace, rel), text);
    }
  }
  const nodeArgs = (process.env.TETHER_RUNNER_NODE_ARGS ?? '').split(' ').filter(Boolean);
  const proc = spawn(process.execPath, [...nodeArgs, entry], {
    cwd: workspace,
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, TETHER_RUN_ID: 'bench', TETHER_WORKSPACE: workspace, TETHER_LOG_LEVEL: 'warn' },
  });
  const secret = randomBytes(32);
  const hello = await bootRunner(
    proc.stdin!,
    proc.stdout!,
    secret,
    { unix: path.join(sockets, 'runner.sock') },
    30_000,
  );
  if (!hello.listening.unix) throw new Error(`${name}: the runner did not listen: ${hello.errors.join('; ')}`);
  proc.stdout!.resume();
  const channel = await connectSocket({ path: hello.listening.unix }, secret);
  const c = createMessageConnection(channel.reader, channel.writer);
  c.listen();
  channel.resume();
  await c.sendRequest(InitializeRequest.type, {
    runId: 'bench',
    conversationId: 'bench',
    workspace,
    features: {
      lsp: LSP,
      ast: false,
      debug: false,
      eval: false,
      questions: { enabled: false, targetSpace: '' },
      vibe: false,
    },
    settings: {},
  });
  let id = 0;
  return {
    name,
    pid: hello.pid,
    proc,
    workspace,
    sockets,
    c,
    close: () => channel.close(),
    ping: () => c.sendRequest(PingRequest.type),
    call: async (tool, a) => {
      const r = await c.sendRequest(CallToolRequest.type, {
        callId: `c${id++}`,
        tool,
        arguments: a,
        surface: { maxTier: 'exec' },
      });
      if (r.isError) throw new Error(`${name}: ${tool} failed: ${JSON.stringify(r.content)}`);
      return r;
    },
  };
}

async function stop(r: Runner): Promise<void> {
  const exited = new Promise((resolve) => r.proc.once('exit', resolve));
  await r.c.sendRequest(ShutdownRequest.type).catch(() => undefined);
  await exited;
  r.c.dispose();
  r.close();
  rmSync(r.workspace, { recursive: true, force: true });
  rmSync(r.sockets, { recursive: true, force: true });
}

async function lsp(r: Runner) {
  const definition = { file: 'src/main.ts', line: 3, symbol: 'Circle' };
  const references = { file: 'src/shapes.ts', line: 21, symbol: 'totalArea' };
  const direct = async (method: ProbeParams['method'], at: typeof definition) => {
    const out = (await r.c.sendRequest(CommandRequest.type, {
      family: ProbeCommand.type.family,
      command: ProbeCommand.type.command,
      payload: { ...at, method, count: 1 },
    })) as { samplesMs: number[] };
    return out.samplesMs[0];
  };
  const call = (action: string, at: object) => r.call('lsp', { action, ...at });
  await call('definition', definition);
  const l = {
    definition: [] as number[],
    direct: [] as number[],
    references: [] as number[],
    refDirect: [] as number[],
  };
  const samples = Math.max(40, Math.round(CALLS / 10));
  for (let i = -5; i < samples; i++) {
    const d = await timeIt(() => call('definition', definition));
    const dd = await direct('textDocument/definition', definition);
    const rr = await timeIt(() => call('references', references));
    const rd = await direct('textDocument/references', references);
    if (i < 0) continue;
    l.definition.push(d);
    l.direct.push(dd);
    l.references.push(rr);
    l.refDirect.push(rd);
  }
  const row = (through: number[], bare: number[]) => ({
    throughRunner: summary(through),
    directToServer: summary(bare),
    p50AddedMs: r3(summary(through).p50 - summary(bare).p50),
  });
  return { definition: row(l.definition, l.direct), references: row(l.references, l.refDirect) };
}

async function main(): Promise<void> {
  const entries = (process.env.TETHER_RUNNER_ENTRIES ?? `runner=${runnerEntry()}`).split(',').map((e) => {
    const at = e.indexOf('=');
    return { name: e.slice(0, at), entry: e.slice(at + 1) };
  });
  const runners: Runner[] = [];
  for (const e of entries) runners.push(await start(e.name, e.entry));
  const kinds: Record<string, (r: Runner) => Promise<unknown>> = {
    ping: (r) => r.ping(),
    read: (r) => r.call('read', { path: 'bench.txt' }),
    readDeep: (r) => r.call('read', { path: DEEP }),
  };
  for (let i = 0; i < 500; i++) for (const r of runners) for (const k of Object.values(kinds)) await k(r);

  if (HOLD) {
    console.error(`runner pid ${runners[0].pid}: attach now, then type a line`);
    await line();
  }
  if (ONLY) {
    const fn = kinds[ONLY];
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < CALLS; i++) await fn(runners[0]);
    console.error(`${CALLS} ${ONLY} calls in ${Number(process.hrtime.bigint() - t0) / 1e6} ms`);
    if (HOLD) {
      console.error('done: detach now, then type a line');
      await line();
    }
  } else {
    const loadBefore = os.loadavg();
    const samples = new Map(
      runners.map((r) => [r.name, { ping: [] as number[], read: [] as number[], readDeep: [] as number[] }]),
    );
    for (let i = 0; i < CALLS; i++)
      for (const r of runners)
        for (const [k, fn] of Object.entries(kinds)) samples.get(r.name)![k as 'ping'].push(await timeIt(() => fn(r)));
    // CPU per call of each kind, in blocks (interleaving kinds would mix them), runners in turn.
    const cpu = new Map(runners.map((r) => [r.name, { ping: 0, read: 0, readDeep: 0 }]));
    for (let round = 0; round < 4; round++)
      for (const [k, fn] of Object.entries(kinds))
        for (const r of runners) {
          const before = cpuMs(r.pid);
          for (let i = 0; i < CALLS / 4; i++) await fn(r);
          cpu.get(r.name)![k as 'ping'] += cpuMs(r.pid) - before;
        }
    const out: Record<string, unknown> = {
      calls: CALLS,
      loadAverageBefore: loadBefore,
      loadAverageAfter: os.loadavg(),
    };
    for (const r of runners) {
      const s = samples.get(r.name)!;
      const c = cpu.get(r.name)!;
      const p50 = (k: 'ping' | 'read' | 'readDeep') => summary(s[k]).p50;
      out[r.name] = {
        p50Ms: { ping: p50('ping'), read: p50('read'), readDeep: p50('readDeep') },
        readAddsP50Ms: r3(p50('read') - p50('ping')),
        readMs: summary(s.read),
        runnerCpuMsPerCall: { ping: r3(c.ping / CALLS), read: r3(c.read / CALLS), readDeep: r3(c.readDeep / CALLS) },
        ...(LSP ? { lsp: await lsp(r) } : {}),
      };
    }
    console.log(JSON.stringify(out, null, 2));
  }
  for (const r of runners) await stop(r);
  // stdin, read for --hold, would keep the process alive.
  process.exit(0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
