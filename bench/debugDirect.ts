/**
 * The baseline of bench/debug.ts: drives a debug adapter with a bare DAP client, inside the
 * same run's sandbox (copied into the workspace and started there), without the gateway, the
 * runner or tether's session layer. Prints one JSON object.
 *
 *   node debugDirect.js <tether dist dir> <adapter> <program> <file> <line> <launches> <samples>
 */
import * as path from 'node:path';
import type * as Adapters from '../runner/src/tools/debug/adapters';
import type * as Transport from '../runner/src/tools/debug/transport';
import type { DebugProtocol } from '@vscode/debugprotocol';

const [dist, adapterId, program, file, lineText, launchesText, samplesText] = process.argv.slice(2);
const mod = <T>(rel: string): T => require(path.join(dist, 'runner/src/tools/debug', rel)) as T;
const { ADAPTERS } = mod<typeof Adapters>('adapters');
const { startAdapter } = mod<typeof Transport>('transport');

const ms = (t0: bigint) => Number(process.hrtime.bigint() - t0) / 1e6;

async function session(): Promise<{ launchMs: number; stackMs: number[]; variablesMs: number[] }> {
  const spec = ADAPTERS[adapterId as Adapters.BuiltinAdapterId];
  const cwd = path.dirname(path.resolve(file));
  const t0 = process.hrtime.bigint();
  const found = await spec.findBinary(cwd, cwd);
  if (!found.ok) throw new Error(found.missing);
  const conn = await startAdapter(
    found.command,
    cwd,
    async () => undefined,
    () => undefined,
  );
  const c = conn.client;
  const stopped = new Promise<DebugProtocol.StoppedEvent>((resolve) =>
    c.onEvent((e) => e.event === 'stopped' && resolve(e as DebugProtocol.StoppedEvent)),
  );
  const initialized = new Promise<void>((resolve) => c.onEvent((e) => e.event === 'initialized' && resolve()));
  const init = await c.request(
    'initialize',
    { adapterID: spec.id, pathFormat: 'path', linesStartAt1: true, columnsStartAt1: true },
    30_000,
  );
  const scratchDir = cwd;
  const launched = c.request(
    'launch',
    spec.launchArguments({ program, args: [], cwd, scratchDir, command: found.command }),
    120_000,
  );
  await initialized;
  await c.request(
    'setBreakpoints',
    { source: { path: path.resolve(file) }, breakpoints: [{ line: Number(lineText) }] },
    30_000,
  );
  if (init.body?.supportsConfigurationDoneRequest) await c.request('configurationDone', {}, 30_000);
  await launched;
  const stop = await stopped;
  const launchMs = ms(t0);
  const threadId = stop.body.threadId!;
  const stackMs: number[] = [];
  const variablesMs: number[] = [];
  let frameId = 0;
  for (let i = 0; i < Number(samplesText); i++) {
    const t = process.hrtime.bigint();
    frameId = (await c.request('stackTrace', { threadId, startFrame: 0, levels: 30 }, 30_000)).body.stackFrames[0].id;
    stackMs.push(ms(t));
  }
  const ref = (await c.request('scopes', { frameId }, 30_000)).body.scopes[0].variablesReference;
  for (let i = 0; i < Number(samplesText); i++) {
    const t = process.hrtime.bigint();
    await c.request('variables', { variablesReference: ref }, 30_000);
    variablesMs.push(ms(t));
  }
  await c.request('disconnect', { terminateDebuggee: true }, 3000).catch(() => undefined);
  conn.kill();
  return { launchMs, stackMs, variablesMs };
}

(async () => {
  const launchMs: number[] = [];
  const stackMs: number[] = [];
  const variablesMs: number[] = [];
  for (let i = 0; i < Number(launchesText); i++) {
    const s = await session();
    launchMs.push(s.launchMs);
    stackMs.push(...s.stackMs);
    variablesMs.push(...s.variablesMs);
  }
  process.stdout.write(JSON.stringify({ launchMs, stackMs, variablesMs }));
  process.exit(0);
})().catch((err) => {
  process.stderr.write(String(err?.stack ?? err));
  process.exit(1);
});
