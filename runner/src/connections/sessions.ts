import type { Readable } from 'node:stream';
import {
  createMessageConnection,
  type MessageConnection,
  type MessageReader,
  type MessageWriter,
} from 'vscode-jsonrpc/node';
import { AskRequest, BridgeRequest, ProgressNotification } from '../../../protocol/src/calls';
import {
  CommandRequest,
  InitializeRequest,
  RunEventNotification,
  ShutdownRequest,
  type InitializeParams,
  type InitializeResult,
  type RunEventParams,
} from '../../../protocol/src/run';
import { CallToolRequest } from '../../../protocol/src/tools';
import { PingRequest } from '../../../protocol/src/transport';
import { startEgressFromEnvironment } from '../egressBridge';
import { logger } from '../log';
import { ToolRegistry } from '../registry';
import { RunContext } from '../run';
import { registerTools } from '../tools';
import type { ToolContext } from '../tool';
import { traced } from '../util/phases';

/**
 * The run as every connection shares it (context, tools, and through them sessions, kernels,
 * staged edits, ledgers and workers), and the connections serving it. What belongs to one
 * call (progress, questions, bridged calls, cancellation) goes back on the connection the
 * call came in on; run events go to every connection that initialized.
 */
export class Sessions {
  private run: RunContext | undefined;
  private registry: ToolRegistry | undefined;
  private initializing: Promise<InitializeResult> | undefined;
  private readonly watchers = new Set<MessageConnection>();
  private readonly open = new Set<MessageConnection>();

  constructor(
    private readonly version: string,
    private readonly stop: (code: number) => Promise<void>,
  ) {}

  get context(): RunContext | undefined {
    return this.run;
  }

  get count(): number {
    return this.open.size;
  }

  /** Serves one authenticated connection until it closes; `onClose` is told when it does. */
  serve(
    reader: MessageReader,
    writer: MessageWriter,
    label: string,
    source: Readable,
    onClose?: () => void,
  ): MessageConnection {
    const connection = createMessageConnection(reader, writer);
    this.open.add(connection);
    connection.onRequest(InitializeRequest.type, async (params) => {
      const result = await this.initialize(params);
      this.watchers.add(connection);
      // A gateway that connects to a run already under way learns what it keeps alive.
      setImmediate(() => this.run?.resources.announce());
      return result;
    });
    connection.onRequest(PingRequest.type, async () => ({
      runId: this.run?.runId ?? null,
      connections: this.open.size,
    }));
    connection.onRequest(CallToolRequest.type, async (params, token) => {
      if (!this.run || !this.registry) throw new Error('runner not initialized');
      const abort = new AbortController();
      token.onCancellationRequested(() => abort.abort('cancelled by the client'));
      const { callId } = params;
      const ctx: ToolContext = {
        callId,
        surface: params.surface,
        signal: abort.signal,
        progress: (text) =>
          void connection.sendNotification(ProgressNotification.type, { callId, text }).catch(() => undefined),
        ask: (card) => connection.sendRequest(AskRequest.type, { callId, card }),
        callTool: (tool, args) => connection.sendRequest(BridgeRequest.type, { callId, tool, arguments: args }),
      };
      const registry = this.registry;
      return traced(params.traceparent, () => registry.call(params.tool, params.arguments, ctx));
    });
    connection.onRequest(CommandRequest.type, async (params) => {
      if (!this.run) throw new Error('runner not initialized');
      return this.run.command(params);
    });
    connection.onRequest(ShutdownRequest.type, async () => {
      setImmediate(() => void this.stop(0));
      return {};
    });
    connection.onClose(() => {
      this.open.delete(connection);
      this.watchers.delete(connection);
      logger.info({ connection: label, open: this.open.size }, 'connection closed');
      onClose?.();
    });
    connection.onError(([err]) => logger.warn({ connection: label, err: err.message }, 'connection error'));
    connection.listen();
    // The preamble left the stream paused; the reader is listening now.
    source.resume();
    logger.info({ connection: label, open: this.open.size }, 'connection open');
    return connection;
  }

  /** The first call sets the run up; later ones (another gateway, a restarted one) get the same tools. */
  private async initialize(params: InitializeParams): Promise<InitializeResult> {
    if (this.initializing) {
      const result = await this.initializing;
      if (params.runId !== this.run?.runId)
        throw new Error(`runner belongs to run ${this.run?.runId}, not ${params.runId}`);
      return result;
    }
    this.initializing = (async () => {
      await startEgressFromEnvironment();
      const run = new RunContext(params);
      run.sendEvent = (event) => this.broadcast(event);
      const registry = new ToolRegistry(run.workspace.root);
      await registerTools(registry, run);
      this.run = run;
      this.registry = registry;
      logger.info({ runId: run.runId, tools: registry.list().map((t) => t.name) }, 'runner initialized');
      return { version: this.version, tools: registry.list() };
    })();
    this.initializing.catch(() => (this.initializing = undefined));
    return this.initializing;
  }

  private broadcast(event: RunEventParams): void {
    for (const c of this.watchers) void c.sendNotification(RunEventNotification.type, event).catch(() => undefined);
  }
}
