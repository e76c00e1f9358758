import {
  createMessageConnection,
  StreamMessageReader,
  StreamMessageWriter,
} from 'vscode-jsonrpc/node';
import { AskRequest, BridgeRequest, ProgressNotification } from '../../protocol/src/calls';
import { CommandRequest, InitializeRequest, RunEventNotification, ShutdownRequest } from '../../protocol/src/run';
import { CallToolRequest } from '../../protocol/src/tools';
import { ToolRegistry } from './registry';
import { RunContext } from './run';
import { registerTools } from './tools';
import { logger } from './log';
import { startEgressFromEnvironment } from './egressBridge';
import type { ToolContext } from './tool';

// stdout carries protocol only: anything a library prints goes to stderr instead.
console.log = console.info = console.debug = console.warn = (...args: unknown[]) => logger.info({ console: args.map(String).join(' ') });

const VERSION = process.env.TETHER_VERSION ?? '0.1.0';

const connection = createMessageConnection(new StreamMessageReader(process.stdin), new StreamMessageWriter(process.stdout));

let run: RunContext | undefined;
let registry: ToolRegistry | undefined;

connection.onRequest(InitializeRequest.type, async (params) => {
  // A restarted gateway re-attaches and initializes again: same run, same tools.
  if (run && registry) {
    if (params.runId !== run.runId) throw new Error(`runner belongs to run ${run.runId}, not ${params.runId}`);
    return { version: VERSION, tools: registry.list() };
  }
  await startEgressFromEnvironment();
  run = new RunContext(params);
  run.sendEvent = (event) => void connection.sendNotification(RunEventNotification.type, event);
  registry = new ToolRegistry(run.workspace.root);
  await registerTools(registry, run);
  logger.info({ runId: run.runId, tools: registry.list().map((t) => t.name) }, 'runner initialized');
  return { version: VERSION, tools: registry.list() };
});

connection.onRequest(CallToolRequest.type, async (params, token) => {
  if (!run || !registry) throw new Error('runner not initialized');
  const abort = new AbortController();
  token.onCancellationRequested(() => abort.abort('cancelled by the client'));
  const { callId } = params;
  const ctx: ToolContext = {
    callId,
    surface: params.surface,
    signal: abort.signal,
    progress: (text) => void connection.sendNotification(ProgressNotification.type, { callId, text }),
    ask: (card) => connection.sendRequest(AskRequest.type, { callId, card }),
    callTool: (tool, args) => connection.sendRequest(BridgeRequest.type, { callId, tool, arguments: args }),
  };
  return registry.call(params.tool, params.arguments, ctx);
});

connection.onRequest(CommandRequest.type, async (params) => {
  if (!run) throw new Error('runner not initialized');
  return run.command(params);
});

async function stop(code: number): Promise<never> {
  await run?.stop();
  process.exit(code);
}

connection.onRequest(ShutdownRequest.type, async () => {
  setImmediate(() => void stop(0));
  return {};
});

// A bug in one tool must not take the whole run down with it.
process.on('uncaughtException', (err) => logger.error({ err }, 'uncaught exception'));
process.on('unhandledRejection', (err) => logger.error({ err }, 'unhandled rejection'));
process.on('SIGTERM', () => void stop(0));
connection.onClose(() => void stop(0));
connection.listen();
logger.info({ pid: process.pid }, 'runner listening on stdio');
