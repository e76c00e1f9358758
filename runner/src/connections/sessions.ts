import type { Readable } from 'node:stream';
import {
  createMessageConnection,
  type MessageConnection,
  type MessageReader,
  type MessageWriter,
} from 'vscode-jsonrpc/node';
import { AskRequest, BridgeRequest, ProgressNotification } from '../../../protocol/src/calls';
import {
  BindRequest,
  CommandRequest,
  InitializeRequest,
  PrepareRequest,
  RunEventNotification,
  ShutdownRequest,
  type BindParams,
  type InitializeResult,
  type PrepareParams,
  type PrepareResult,
  type RunEventParams,
} from '../../../protocol/src/run';
import { CallToolRequest } from '../../../protocol/src/tools';
import { PingRequest, QuiesceRequest, UsageRequest } from '../../../protocol/src/transport';
import { startEgressFromEnvironment } from '../egressBridge';
import { logger } from '../log';
import { UsageReader } from '../oom/usage';
import { checkOomBeforeAnswer } from '../oom/watcher';
import { ToolRegistry } from '../registry';
import { RunContext } from '../run';
import { registerTools } from '../tools';
import type { ToolContext } from '../tool';
import { CallCancellation } from '../util/cancellation';
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
  private prepared: PrepareParams | undefined;
  private preparing: Promise<PrepareResult> | undefined;
  private binding: Promise<InitializeResult> | undefined;
  private boundTo: string | undefined;
  private readonly watchers = new Set<MessageConnection>();
  private readonly open = new Set<MessageConnection>();
  /**
   * Closes every socket connection and listener, before a memory checkpoint, and how many
   * connections it would close now. Set by whoever owns the listeners.
   */
  quiesce?: { closing: () => number; close: () => Promise<void> };

  private readonly usage = new UsageReader(() => this.prepared?.workspace);

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
    connection.onRequest(PrepareRequest.type, (params) => this.prepare(params));
    connection.onRequest(BindRequest.type, async (params) => {
      const result = await this.bind(params);
      this.watchers.add(connection);
      return result;
    });
    // Prepare and bind in one: a cold run, or a restarted gateway finding its run again.
    connection.onRequest(InitializeRequest.type, async (params) => {
      if (!this.binding) await this.prepare({ workspace: params.workspace, settings: params.settings });
      const result = await this.bind(params);
      this.watchers.add(connection);
      // A gateway that connects to a run already under way learns what it keeps alive.
      setImmediate(() => this.run?.resources.announce());
      return result;
    });
    connection.onRequest(PingRequest.type, async () => ({
      runId: this.run?.runId ?? null,
      connections: this.open.size,
    }));
    connection.onRequest(UsageRequest.type, async () => this.usage.read());
    connection.onRequest(CallToolRequest.type, async (params, token) => {
      if (!this.run || !this.registry) throw new Error('runner not initialized');
      const cancellation = new CallCancellation();
      token.onCancellationRequested(() => cancellation.abort('cancelled by the client'));
      const { callId } = params;
      const ctx: ToolContext = {
        callId,
        surface: params.surface,
        get signal() {
          return cancellation.signal;
        },
        cancellation,
        progress: (text) =>
          void connection.sendNotification(ProgressNotification.type, { callId, text }).catch(() => undefined),
        ask: (card) => connection.sendRequest(AskRequest.type, { callId, card }),
        callTool: (tool, args) => connection.sendRequest(BridgeRequest.type, { callId, tool, arguments: args }),
      };
      const registry = this.registry;
      const result = await traced(params.traceparent, () => registry.call(params.tool, params.arguments, ctx));
      checkOomBeforeAnswer();
      return result;
    });
    connection.onRequest(QuiesceRequest.type, async () => {
      const quiesce = this.quiesce;
      if (!quiesce) throw new Error('this runner has no listeners to close');
      // The answer leaves first: the connection it goes out on is one of those closed (each is
      // ended, what was written to it flushed, before it is destroyed).
      setTimeout(() => void quiesce.close().catch((err: Error) => logger.error({ err: err.message }, 'quiesce')), 20);
      return { closing: quiesce.closing() };
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

  /**
   * Stops serving one connection without ending the run: the runner's stdio once a socket is in
   * use. Nothing read from it afterwards reaches a handler, and nothing more is written to it.
   */
  retire(connection: MessageConnection, label: string, reason: string): void {
    if (!this.open.delete(connection)) return;
    this.watchers.delete(connection);
    connection.dispose();
    logger.info({ connection: label, reason, open: this.open.size }, 'connection retired');
  }

  /**
   * Everything that does not depend on the run. Until bound it may be asked again (a restarted
   * gateway re-adopting an idle pooled runner): the newer settings win, nothing of a run exists.
   */
  private async prepare(params: PrepareParams): Promise<PrepareResult> {
    if (this.binding) throw new Error(`runner is bound to run ${this.boundTo}; it cannot be prepared again`);
    if (typeof params?.workspace !== 'string' || !params.workspace.startsWith('/'))
      throw new Error('prepare needs an absolute workspace path');
    const previous = this.preparing ?? Promise.resolve(undefined);
    this.preparing = (async () => {
      await previous.catch(() => undefined);
      // The egress bridge depends on the sandbox (its environment), never on the run.
      if (!this.prepared) await startEgressFromEnvironment();
      this.prepared = { workspace: params.workspace, settings: params.settings ?? {} };
      return { version: this.version };
    })();
    return this.preparing;
  }

  /** The run this runner serves from now on: the first call sets it up; the same run again gets the same tools. */
  private async bind(params: BindParams): Promise<InitializeResult> {
    if (this.binding) {
      if (params.runId === this.boundTo) return this.binding;
      // A sandbox started from a checkpoint of the bound run's: the fork is this runner's run now.
      if (params.forkOf !== undefined && params.forkOf === this.boundTo && this.run) {
        this.boundTo = params.runId;
        this.run.becomeFork(params.runId, params.conversationId);
        logger.info({ runId: params.runId, forkOf: params.forkOf }, 'runner bound to a fork of its run');
        return this.binding;
      }
      throw new Error(`runner belongs to run ${this.boundTo}, not ${params.runId}`);
    }
    if (!this.preparing) throw new Error('runner not prepared');
    const preparing = this.preparing;
    this.boundTo = params.runId;
    this.binding = (async () => {
      await preparing;
      const prepared = this.prepared!;
      const run = new RunContext({ ...prepared, ...params });
      run.sendEvent = (event) => this.broadcast(event);
      const registry = new ToolRegistry(run.workspace.root);
      await registerTools(registry, run);
      this.run = run;
      this.registry = registry;
      logger.info({ runId: run.runId, tools: registry.list().map((t) => t.name) }, 'runner bound');
      return { version: this.version, tools: registry.list() };
    })();
    this.binding.catch(() => {
      this.binding = undefined;
      this.boundTo = undefined;
    });
    return this.binding;
  }

  private broadcast(event: RunEventParams): void {
    for (const c of this.watchers) void c.sendNotification(RunEventNotification.type, event).catch(() => undefined);
  }
}
