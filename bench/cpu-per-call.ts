/**
 * tether's own CPU per call (one command: `bench/run.sh cpu-per-call`): process accounting of
 * the gateway (a `tether serve` child) and the run's runner (its host process), not wall
 * clock, over `calls` calls each of `read`, lsp `definition` and `hover` (pyright answers them;
 * its own CPU is reported apart, it is the server's, not tether's) and `ast_grep`, one after
 * another on the client's shared Calls stream. The baseline, measured in the same run: both
 * processes' CPU over an idle window as long as the calls took (timers, sweeps), subtracted.
 * Beside `read`, block for block: the design's floor (`callFloor.ts`: a bare grpc-js stream and
 * one JSON-RPC round trip to a second process, no tether code), whose two processes' CPU is
 * what any gateway and runner built this way spend per call on this machine.
 * Usage: node dist/bench/cpu-per-call.js [calls=2000] [repeats=3]
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { once } from 'node:events';
import * as os from 'node:os';
import * as path from 'node:path';
import Docker from 'dockerode';
import { RunState } from '@tether/contract';
import { resultText, TetherClient } from '../clients/typescript/src';
import { readImagesEnv } from '../gateway/src/sandbox/image';
import { freePort } from '../test/helpers/ports';
import { serveGateway } from '../test/integration/docker/support';
import { startCallFloor } from './callFloor';
import { summary, writeResult } from './lib';

const CALLS = Number(process.argv[2] ?? 2000);
const REPEATS = Number(process.argv[3] ?? 3);
const image = process.env.TETHER_IMAGE || readImagesEnv().TETHER_IMAGE;
if (!image) throw new Error('no runner image: run scripts/setup.sh');
const docker = new Docker();
const TICK_MS = 10; // USER_HZ is 100 on Linux: /proc/<pid>/stat counts in 10 ms ticks

/**
 * How long an idle vCPU polls before it halts (the guest's haltpoll driver), when it has one: at
 * 0 every wake-up of a process that slept reaches a halted vCPU, which a process pays for in
 * its own CPU time.
 */
function haltPollNs(): number | undefined {
  try {
    return Number(readFileSync('/sys/module/haltpoll/parameters/guest_halt_poll_ns', 'utf8'));
  } catch {
    return undefined;
  }
}

/** User + system CPU of one process and its finished children, in ms. */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * TICK_MS; // utime, stime
}

const childrenOf = (pid: number) =>
  readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);

/** The runner: the one child of the container's init. Its own children are the servers. */
async function runnerPid(runId: string): Promise<number> {
  const [c] = await docker.listContainers({ filters: JSON.stringify({ label: [`dev.tether.run-id=${runId}`] }) });
  if (!c) throw new Error(`no container for ${runId}`);
  const init = (await docker.getContainer(c.Id).inspect()).State.Pid;
  const [runner] = childrenOf(init);
  return runner;
}

/**
 * CPU per call of `CALLS` calls, one at a time: the two processes' user + system time over the
 * block, less what they spend idle for as long (timers, sweeps).
 */
async function perCall(gateway: number, runner: number, servers: () => number, call: () => Promise<void>) {
  const before = { g: cpuMs(gateway), r: cpuMs(runner), s: servers(), t: performance.now() };
  for (let i = 0; i < CALLS; i++) await call();
  const wallMs = performance.now() - before.t;
  const busy = { g: cpuMs(gateway) - before.g, r: cpuMs(runner) - before.r, s: servers() - before.s };
  const idleFrom = { g: cpuMs(gateway), r: cpuMs(runner), s: servers() };
  await new Promise((res) => setTimeout(res, wallMs));
  const idle = { g: cpuMs(gateway) - idleFrom.g, r: cpuMs(runner) - idleFrom.r, s: servers() - idleFrom.s };
  return {
    gateway: (busy.g - idle.g) / CALLS,
    runner: (busy.r - idle.r) / CALLS,
    servers: (busy.s - idle.s) / CALLS,
    wall: wallMs / CALLS,
  };
}

const PROJECT = {
  'pyproject.toml': '[project]\nname = "shapes"\nversion = "0.1.0"\n',
  'shapes/__init__.py': '',
  'shapes/area.py': 'import math\n\n\ndef area(r: float) -> float:\n    return math.pi * r * r\n',
  'main.py': 'from shapes.area import area\n\nprint(area(2.0))\n',
};

async function main() {
  const load = () => os.loadavg().map((x) => Math.round(x * 100) / 100);
  const loadBefore = load();
  const port = await freePort();
  const g = serveGateway({
    TETHER_TOKENS: 'cpu-token=acme',
    TETHER_INSTANCE: `cpu-${process.pid}`,
    TETHER_STATE_DIR: mkdtempSync(path.join(os.tmpdir(), 'tether-cpu-')),
    TETHER_LISTEN: `127.0.0.1:${port}`,
    TETHER_HTTP_LISTEN: 'off',
    TETHER_IMAGE: image!,
    TETHER_PROVIDER: 'docker',
    TETHER_POOL_SIZE: '0',
    TETHER_LOG_LEVEL: 'warn',
  });
  await g.ready;
  const gateway = g.child.pid!;
  const c = new TetherClient(`127.0.0.1:${port}`, 'cpu-token');
  const run = await c.createRun({ conversationId: 'cpu', features: { lsp: true, ast: true } });
  if (run.state !== RunState.READY) throw new Error(run.error);
  try {
    await c.putFileMap(run.runId, PROJECT);
    const runner = await runnerPid(run.runId);
    const call = async (tool: string, args: Record<string, unknown>) => {
      const out = await c.callTool(run.runId, tool, args);
      if (out.result.isError) throw new Error(`${tool}: ${resultText(out.result)}`);
    };
    const tools: [string, string, Record<string, unknown>][] = [
      ['read', 'read', { path: 'main.py' }],
      ['lsp definition', 'lsp', { action: 'definition', file: 'main.py', line: 3, symbol: 'area' }],
      ['lsp hover', 'lsp', { action: 'hover', file: 'main.py', line: 3, symbol: 'area' }],
      ['ast_grep', 'ast_grep', { pattern: 'area($R)', language: 'python', path: '.' }],
    ];
    const servers = () => childrenOf(runner).reduce((sum, pid) => sum + cpuMs(pid), 0);
    const floor = await startCallFloor();
    for (let i = 0; i < 200; i++) await floor.call();
    const floorPer = { gateway: [] as number[], runner: [] as number[], wall: [] as number[] };
    const results: Record<string, unknown> = {};
    for (const [name, tool, args] of tools) {
      for (let i = 0; i < 200; i++) await call(tool, args); // warm: the server up, the code hot
      const per = { gateway: [] as number[], runner: [] as number[], servers: [] as number[], wall: [] as number[] };
      for (let r = 0; r < REPEATS; r++) {
        if (name === 'read') {
          const f = await perCall(floor.gatewayPid, floor.runnerPid, () => 0, floor.call);
          floorPer.gateway.push(f.gateway);
          floorPer.runner.push(f.runner);
          floorPer.wall.push(f.wall);
        }
        const t = await perCall(gateway, runner, servers, () => call(tool, args));
        per.gateway.push(t.gateway);
        per.runner.push(t.runner);
        per.servers.push(t.servers);
        per.wall.push(t.wall);
      }
      const tether = per.gateway.map((x, i) => x + per.runner[i]);
      results[name] = {
        tetherCpuMsPerCall: summary(tether),
        gatewayCpuMsPerCall: summary(per.gateway),
        runnerCpuMsPerCall: summary(per.runner),
        serverCpuMsPerCall: summary(per.servers),
        wallMsPerCall: summary(per.wall),
      };
      console.error(`${name}: tether ${summary(tether).p50.toFixed(3)} ms CPU per call`);
    }
    await floor.close();
    const floorTotal = floorPer.gateway.map((x, i) => x + floorPer.runner[i]);
    const readTotal = (results.read as { tetherCpuMsPerCall: { p50: number } }).tetherCpuMsPerCall.p50;
    results.floor = {
      what: 'a bare grpc-js bidi stream + one JSON-RPC round trip to a second process; no tether code',
      cpuMsPerCall: summary(floorTotal),
      gatewayCpuMsPerCall: summary(floorPer.gateway),
      runnerCpuMsPerCall: summary(floorPer.runner),
      wallMsPerCall: summary(floorPer.wall),
      readOverFloor: Math.round((readTotal / summary(floorTotal).p50) * 100) / 100,
    };
    console.error(`floor: ${summary(floorTotal).p50.toFixed(3)} ms CPU per call`);
    writeResult('cpu-per-call', {
      calls: CALLS,
      repeats: REPEATS,
      clockTickMs: TICK_MS,
      guestHaltPollNs: haltPollNs(),
      shape: 'TypeScript client, shared Calls stream, one call at a time; runc',
      ...results,
      loadAverage: { before: loadBefore, after: load() },
    });
  } finally {
    await c.deleteRun(run.runId).catch(() => undefined);
    c.close();
    g.child.kill('SIGTERM');
    await once(g.child, 'exit');
  }
}

void main().catch((err) => {
  console.error(err);
  process.exit(1);
});
