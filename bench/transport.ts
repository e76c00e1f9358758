/**
 * The call path, side by side in one run of this program, so every figure shares the
 * machine's state with its baseline:
 *  - a bare grpc-js echo: unary, one bidi stream per call (CallTool's shape), and one bidi
 *    stream carrying every call (multiplexed);
 *  - a trivial `read` through the process provider, Docker over the runner's socket, Docker
 *    over the engine's attach (stdio), and the same two under gVisor when the engine has
 *    `runsc` with `--host-uds=all`, each on the client's shared Calls stream; and Docker over
 *    the socket with one CallTool stream per call; rounds interleave every path, so a load
 *    spike on a shared machine hits all of them alike;
 *  - the gateway's side of a run: one multiplexed connection against a connection (and its
 *    handshake) per call;
 *  - lsp `definition` and `references` through tether against the same warm server asked
 *    directly by the runner (TypeScript);
 *  - throughput: calls/s with 50 in flight against one run, and spread over 20 runs.
 * Usage: node dist/bench/transport.js [calls]   (or `npm run bench -- transport`)
 */
import { echoServer } from './echo';
import { execFileSync } from 'node:child_process';
import * as os from 'node:os';
import { createMessageConnection } from 'vscode-jsonrpc/node';
import { ProbeCommand, type ProbeParams } from '../protocol/src/lsp';
import { PingRequest } from '../protocol/src/transport';
import { connectSocket } from '../gateway/src/runs/connection/channel';
import { defaultConfig } from '../gateway/src/config';
import { TetherClient } from '../clients/typescript/src';
import { fixture } from '../test/integration/lsp/helpers';
import { startTestGateway, type TestGateway } from '../test/helpers/gateway';
import { summary, timeIt, writeResult } from './lib';

const CALLS = Number(process.argv[2] ?? 500);
const LSP_SAMPLES = 40;
const IN_FLIGHT = 50;
const RUNS = 20;
const THROUGHPUT_CALLS = 2000;

const r2 = (x: number) => Math.round(x * 100) / 100;
const r3 = (x: number) => Math.round(x * 1000) / 1000;

/** Whether the engine has gVisor with host sockets passed through (else its socket path is stdio anyway). */
function runscWithHostUds(): boolean {
  try {
    const runtimes = JSON.parse(
      execFileSync('docker', ['info', '--format', '{{json .Runtimes}}'], { encoding: 'utf8' }),
    ) as Record<string, { runtimeArgs?: string[] }>;
    return !!runtimes.runsc?.runtimeArgs?.includes('--host-uds=all');
  } catch {
    return false;
  }
}

interface Path {
  name: string;
  t: TestGateway;
  runId: string;
}

async function gatewayFor(provider: 'process' | 'docker', runtime: string, fastPath: boolean): Promise<TestGateway> {
  const base = defaultConfig().docker;
  return startTestGateway({
    provider,
    fastPath,
    docker: { ...base, image: process.env.TETHER_IMAGE || base.image, runtime },
    tenancy: { default: { callTool: { perSecond: 1_000_000, burst: 1_000_000 } } },
  });
}

async function readPath(name: string, provider: 'process' | 'docker', runtime = '', fastPath = true): Promise<Path> {
  const t = await gatewayFor(provider, runtime, fastPath);
  const run = await t.alice.createRun({ conversationId: 'bench' });
  if (run.error) throw new Error(`${name}: ${run.error}`);
  await t.alice.putFileMap(run.runId, { 'bench.txt': 'hello\n' });
  const transport = t.gateway.runs.ready('alice', run.runId).runner.transport;
  const want = fastPath ? 'unix' : 'stdio';
  if (transport !== want) throw new Error(`${name}: the run uses ${transport}, not ${want}`);
  return { name, t, runId: run.runId };
}

async function read(t: TestGateway, runId: string, client: TetherClient = t.alice): Promise<void> {
  const out = await client.callTool(runId, 'read', { path: 'bench.txt' });
  if (out.result.isError) throw new Error(`read failed: ${out.text}`);
}

/** Each round times one call of every contender, in turn. */
async function interleaved(
  rounds: number,
  contenders: Record<string, () => Promise<unknown>>,
): Promise<Record<string, number[]>> {
  const out: Record<string, number[]> = Object.fromEntries(Object.keys(contenders).map((k) => [k, []]));
  for (let i = -Math.min(200, rounds); i < rounds; i++) {
    for (const [k, fn] of Object.entries(contenders)) {
      const ms = await timeIt(fn);
      if (i >= 0) out[k].push(ms);
    }
  }
  return out;
}

/** The gateway's end of a run: a ping over its one connection, against a new connection per call. */
async function runnerSide(p: Path, rounds: number) {
  const sandbox = p.t.gateway.runs.ready('alice', p.runId).sandbox;
  if (!sandbox.socket) throw new Error('the run has no socket');
  const target = sandbox.socket;
  const open = async () => {
    const channel = await connectSocket(target, sandbox.secret);
    const c = createMessageConnection(channel.reader, channel.writer);
    c.listen();
    channel.resume();
    return { c, close: () => (c.dispose(), channel.close()) };
  };
  const kept = await open();
  const s = await interleaved(rounds, {
    multiplexed: () => kept.c.sendRequest(PingRequest.type),
    connectionPerCall: async () => {
      const one = await open();
      await one.c.sendRequest(PingRequest.type);
      one.close();
    },
  });
  kept.close();
  return { multiplexedPingMs: summary(s.multiplexed), connectionPerCallPingMs: summary(s.connectionPerCall) };
}

async function lsp(t: TestGateway) {
  const run = await t.alice.createRun({ conversationId: 'bench-lsp', features: { lsp: true } });
  if (run.error) throw new Error(`lsp run: ${run.error}`);
  await t.alice.putFileMap(run.runId, { ...fixture('ts'), 'bench.txt': 'hello\n' });
  const definition = { file: 'src/main.ts', line: 3, symbol: 'Circle' };
  const references = { file: 'src/shapes.ts', line: 21, symbol: 'totalArea' };
  const runner = t.gateway.runs.ready('alice', run.runId).runner;
  const call = async (action: string, at: object) => {
    const r = await t.alice.callTool(run.runId, 'lsp', { action, ...at });
    if (r.result.isError) throw new Error(`lsp ${action}: ${r.text}`);
  };
  const direct = async (method: ProbeParams['method'], at: typeof definition, via: ProbeParams['via'] = 'server') =>
    (await runner.command(ProbeCommand.type, { ...at, method, count: 1, via })).samplesMs[0];
  await call('definition', definition);
  const s = {
    floor: [] as number[],
    definition: [] as number[],
    definitionDirect: [] as number[],
    references: [] as number[],
    referencesDirect: [] as number[],
    definitionInRunner: [] as number[],
    referencesInRunner: [] as number[],
  };
  for (let i = -5; i < LSP_SAMPLES; i++) {
    // The floor every tool call pays, in the same run: a trivial read.
    const f = await timeIt(() => read(t, run.runId));
    const d = await timeIt(() => call('definition', definition));
    const dd = await direct('textDocument/definition', definition);
    const r = await timeIt(() => call('references', references));
    const rd = await direct('textDocument/references', references);
    const dt = await direct('textDocument/definition', definition, 'tool');
    const rt = await direct('textDocument/references', references, 'tool');
    if (i < 0) continue;
    s.definitionInRunner.push(dt);
    s.referencesInRunner.push(rt);
    s.floor.push(f);
    s.definition.push(d);
    s.definitionDirect.push(dd);
    s.references.push(r);
    s.referencesDirect.push(rd);
  }
  await t.alice.deleteRun(run.runId);
  const floor = summary(s.floor);
  // p50ToolMs: what the lsp tool adds beyond the call floor and the server's own time.
  // inRunner: the whole tool action timed inside the runner, with no transport; so
  // p50ToolInRunnerMs is the tool's own work, and p50TransportMs what the call's way there and
  // back (client, gateway, runner hop) adds to it.
  const row = (through: number[], bare: number[], inRunner: number[]) => {
    const a = summary(through);
    const b = summary(bare);
    const c = summary(inRunner);
    return {
      throughTether: a,
      directToServer: b,
      toolInRunner: c,
      p50AddedMs: r3(a.p50 - b.p50),
      p50ToolMs: r3(a.p50 - floor.p50 - b.p50),
      p50ToolInRunnerMs: r3(c.p50 - b.p50),
      p50TransportMs: r3(a.p50 - c.p50),
    };
  };
  return {
    language: 'typescript',
    trivialReadMs: floor,
    definition: row(s.definition, s.definitionDirect, s.definitionInRunner),
    references: row(s.references, s.referencesDirect, s.referencesInRunner),
  };
}

/** `total` reads kept `IN_FLIGHT` at a time, spread round-robin over `runIds`; calls per second. */
async function throughput(t: TestGateway, runIds: string[], total: number, client = t.alice): Promise<number> {
  let next = 0;
  const worker = async () => {
    while (next < total) {
      const i = next++;
      await read(t, runIds[i % runIds.length], client);
    }
  };
  const t0 = process.hrtime.bigint();
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  return Math.round(total / (Number(process.hrtime.bigint() - t0) / 1e9));
}

async function main() {
  const began = Date.now();
  const loadBefore = os.loadavg();
  const gvisor = runscWithHostUds();
  const echo = await echoServer();
  const paths: Path[] = [];
  try {
    paths.push(await readPath('process', 'process'));
    paths.push(await readPath('dockerSocket', 'docker'));
    paths.push(await readPath('dockerStdio', 'docker', '', false));
    if (gvisor) {
      paths.push(await readPath('runscSocket', 'docker', 'runsc'));
      paths.push(await readPath('runscStdio', 'docker', 'runsc', false));
    }
    const docker = paths.find((p) => p.name === 'dockerSocket')!;
    // The same run, with one CallTool stream per call instead of the shared Calls stream.
    const ownStreams = new TetherClient(docker.t.gateway.address, 'token-alice', { multiplex: false });
    const s = await interleaved(CALLS, {
      echoUnary: echo.unary,
      echoStreamPerCall: echo.streamPerCall,
      echoMultiplexed: echo.multiplexed,
      ...Object.fromEntries(paths.map((p) => [p.name, () => read(p.t, p.runId)])),
      dockerSocketCallTool: () => read(docker.t, docker.runId, ownStreams),
    });
    const echoP50 = summary(s.echoUnary).p50;
    const reads: Record<string, unknown> = {};
    for (const name of [...paths.map((p) => p.name), 'dockerSocketCallTool']) {
      const sum = summary(s[name]);
      reads[name] = { ...sum, ratioToEcho: r2(sum.p50 / echoP50) };
    }
    const runsc = paths.find((p) => p.name === 'runscSocket');
    const runscStdio = paths.find((p) => p.name === 'runscStdio');
    const runscVsRunc = runsc
      ? {
          socket: r2(summary(s.runscSocket).p50 / summary(s.dockerSocket).p50),
          stdio: runscStdio ? r2(summary(s.runscStdio).p50 / summary(s.dockerSocket).p50) : undefined,
        }
      : undefined;

    const runnerConnection = await runnerSide(docker, Math.min(CALLS, 300));
    const lspFigures = await lsp(docker.t);

    const oneRun = await throughput(docker.t, [docker.runId], THROUGHPUT_CALLS);
    const oneRunCallTool = await throughput(docker.t, [docker.runId], THROUGHPUT_CALLS, ownStreams);
    ownStreams.close();
    const many = await Promise.all(
      Array.from({ length: RUNS - 1 }, async () => {
        const run = await docker.t.alice.createRun({ conversationId: 'bench-many' });
        if (run.error) throw new Error(run.error);
        await docker.t.alice.putFileMap(run.runId, { 'bench.txt': 'hello\n' });
        return run.runId;
      }),
    );
    const manyRuns = await throughput(docker.t, [docker.runId, ...many], THROUGHPUT_CALLS);
    await Promise.all(many.map((id) => docker.t.alice.deleteRun(id)));

    writeResult('transport', {
      description: `sequential calls over loopback, ${CALLS} rounds interleaving every path, after warm-up; docker runs through the runner image, runc unless named; reads on the client's shared Calls stream unless named CallTool (one stream per call)`,
      loadAverageBefore: loadBefore,
      loadAverageAfter: os.loadavg(),
      seconds: Math.round((Date.now() - began) / 1000),
      echo: {
        unaryMs: summary(s.echoUnary),
        streamPerCallMs: summary(s.echoStreamPerCall),
        multiplexedStreamMs: summary(s.echoMultiplexed),
      },
      readMs: reads,
      runsc: gvisor ? runscVsRunc : 'not measured: the engine has no runsc with --host-uds=all',
      runnerConnection,
      lsp: lspFigures,
      throughput: {
        inFlight: IN_FLIGHT,
        calls: THROUGHPUT_CALLS,
        oneRunCallsPerSecond: oneRun,
        oneRunCallToolStreamsCallsPerSecond: oneRunCallTool,
        runs: RUNS,
        acrossRunsCallsPerSecond: manyRuns,
      },
    });
  } finally {
    echo.close();
    for (const p of paths) {
      await p.t.alice.deleteRun(p.runId).catch(() => undefined);
      await p.t.close();
    }
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
