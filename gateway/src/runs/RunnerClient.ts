import { randomUUID } from 'node:crypto';
import {
  CancellationTokenSource,
  createMessageConnection,
  type Message,
  type MessageConnection,
  type RequestMessage,
} from 'vscode-jsonrpc/node';
import {
  AskRequest,
  BridgeRequest,
  ProgressNotification,
  type QuestionCard,
  type QuestionOutcome,
} from '../../../protocol/src/calls';
import {
  BindRequest,
  CommandRequest,
  InitializeRequest,
  PrepareRequest,
  RunEventNotification,
  ShutdownRequest,
  type BindParams,
  type FamilyCommand,
  type InitializeParams,
  type InitializeResult,
  type PrepareParams,
  type PrepareResult,
  type RunEventParams,
  type RunEventType,
} from '../../../protocol/src/run';
import {
  CallToolRequest,
  type CallToolParams,
  type CallerSurface,
  type RunnerPhase,
  type ToolResult,
} from '../../../protocol/src/tools';
import { PingRequest, QuiesceRequest, type UsageResult, UsageRequest } from '../../../protocol/src/transport';
import type { Sandbox } from '../sandbox/provider';
import { logger } from '../log';
import type { Channel } from './connection/channel';
import { RunnerLink } from './connection/RunnerLink';

/** What the gateway does for a call while the runner works on it. */
export interface CallHooks {
  progress(text: string): void;
  ask(card: QuestionCard): Promise<QuestionOutcome>;
  bridge(tool: string, args: unknown): Promise<ToolResult>;
  /** The runner's own phases of a traced call (sent only when the call carried a traceparent). */
  phases?(phases: RunnerPhase[]): void;
}

export class RunnerGoneError extends Error {}

const RECONNECT_ATTEMPTS = 5;

interface PendingCall {
  hooks: CallHooks;
  reject: (e: Error) => void;
  /** The connection the call went to. */
  on?: MessageConnection;
  /** Whether its request left whole: only then can the runner have started it. */
  sent?: boolean;
  /** Sends a call that never left on the next connection; tool calls only. */
  resend?: () => void;
}

/** The callId of a CallTool request, as it goes to the runner. */
function callIdOf(msg: Message): string | undefined {
  const m = msg as Partial<RequestMessage>;
  if (m.method !== CallToolRequest.type.method || m.id === undefined) return undefined;
  return (m.params as CallToolParams | undefined)?.callId;
}

/**
 * The gateway's end of one runner: one multiplexed JSON-RPC connection at a time, over the
 * runner's socket where it has one, else its stdio. A socket connection that drops while the
 * runner lives is opened again: calls in flight on it end UNAVAILABLE, calls not yet sent
 * wait for the new connection.
 */
export class RunnerClient {
  private connection: MessageConnection | undefined;
  private ready: Promise<MessageConnection>;
  private readonly link: RunnerLink;
  private readonly calls = new Map<string, PendingCall>();
  private gone: Error | undefined;
  private initParams: InitializeParams | undefined;
  private shuttingDown = false;
  /** Whether a connection was opened before: a later one is a reconnection. */
  private opened = false;
  /** Set while the runner is prepared but not yet bound (a pooled runner). */
  private prepareParams: PrepareParams | undefined;
  private readonly eventListeners: ((e: RunEventParams) => void)[] = [];
  private readonly goneListeners: ((err: Error) => void)[] = [];
  lastActivity = Date.now();
  /** The transport in use: `unix`, `tcp` or `stdio`. */
  transport: Channel['kind'] | undefined;

  constructor(readonly sandbox: Sandbox) {
    this.link = new RunnerLink(sandbox);
    this.ready = this.open();
    this.ready.catch((err: Error) =>
      this.fail(err instanceof RunnerGoneError ? err : new RunnerGoneError(err.message)),
    );
    void sandbox.exited.then((exit) => this.fail(new RunnerGoneError(exit.reason)));
  }

  private async open(): Promise<MessageConnection> {
    const channel = await this.link.open();
    if (this.gone) {
      channel.close();
      throw this.gone;
    }
    const connection = createMessageConnection(channel.reader, channel.writer);
    channel.writer.onWritten = (msg) => {
      const id = callIdOf(msg);
      const call = id === undefined ? undefined : this.calls.get(id);
      if (call && call.on === connection) call.sent = true;
    };
    connection.onNotification(ProgressNotification.type, (p) => this.calls.get(p.callId)?.hooks.progress(p.text));
    connection.onRequest(AskRequest.type, async (p) => {
      const call = this.calls.get(p.callId);
      if (!call) return { kind: 'unavailable', reason: 'the call that asked has ended' };
      return call.hooks.ask(p.card);
    });
    connection.onRequest(BridgeRequest.type, async (p) => {
      const call = this.calls.get(p.callId);
      if (!call)
        return { content: [{ type: 'text', text: 'the call that made this bridged call has ended' }], isError: true };
      return call.hooks.bridge(p.tool, p.arguments);
    });
    connection.onNotification(RunEventNotification.type, (e) => this.eventListeners.forEach((l) => l(e)));
    connection.onError(([err]) =>
      logger.warn({ runId: this.sandbox.runId, err: err.message }, 'runner connection error'),
    );
    connection.onClose(() => this.dropped(connection, channel));
    connection.listen();
    channel.resume();
    this.connection = connection;
    this.transport = channel.kind;
    logger.info({ runId: this.sandbox.runId, transport: channel.kind }, 'runner connected');
    // A reconnection says again what the runner was told (it answers with the same tools), and
    // watches run events only once it has; the first connection's requests are waiting on it.
    const again = this.opened;
    this.opened = true;
    if (again && this.initParams) await connection.sendRequest(InitializeRequest.type, this.initParams);
    else if (again && this.prepareParams) await connection.sendRequest(PrepareRequest.type, this.prepareParams);
    return connection;
  }

  private dropped(connection: MessageConnection, channel: Channel): void {
    channel.close();
    if (this.gone || this.connection !== connection) return;
    this.connection = undefined;
    const reconnectable = this.link.reconnectable;
    // A call whose request left may have started in the runner: it ends, UNAVAILABLE. One
    // that never left goes on the next connection.
    const unsent: PendingCall[] = [];
    for (const [id, c] of this.calls) {
      if (c.on !== connection) continue;
      if (!c.sent && c.resend && reconnectable) {
        unsent.push(c);
        continue;
      }
      c.reject(new RunnerGoneError('the connection to the runner dropped'));
      this.calls.delete(id);
    }
    if (!reconnectable || this.shuttingDown) {
      this.fail(new RunnerGoneError('the runner connection closed'));
      return;
    }
    logger.warn({ runId: this.sandbox.runId, resent: unsent.length }, 'runner connection dropped; reconnecting');
    this.ready = this.reconnect();
    this.ready.catch((err: Error) =>
      this.fail(err instanceof RunnerGoneError ? err : new RunnerGoneError(err.message)),
    );
    for (const c of unsent) c.resend?.();
  }

  private async reconnect(): Promise<MessageConnection> {
    let last: Error | undefined;
    for (let i = 0; i < RECONNECT_ATTEMPTS; i++) {
      await new Promise((r) => setTimeout(r, 50 * 2 ** i));
      if (this.gone) throw this.gone;
      try {
        return await this.open();
      } catch (err) {
        last = err as Error;
      }
    }
    throw new RunnerGoneError(`could not reconnect to the runner: ${last?.message}`);
  }

  /** Ends every pending call at once: a dead runner must never leave a client waiting. */
  private fail(err: Error): void {
    if (this.gone) return;
    this.gone = err;
    for (const c of this.calls.values()) c.reject(err);
    this.calls.clear();
    this.connection?.dispose();
    this.goneListeners.forEach((l) => l(err));
  }

  /** Called once, when the runner can no longer be reached. */
  onGone(listener: (err: Error) => void): void {
    if (this.gone) listener(this.gone);
    else this.goneListeners.push(listener);
  }

  get failure(): Error | undefined {
    return this.gone;
  }

  /** Calls `listener` with the payload of every run event of this kind. */
  onRunEvent<P>(type: RunEventType<P>, listener: (payload: P) => void): void {
    // The runner sends each kind with the payload its RunEventType declares.
    this.eventListeners.push((e) => {
      if (e.kind === type.kind) listener(e.payload as P);
    });
  }

  /** The runner's tools, once it has started; gives up after `timeoutMs`. */
  async initialize(params: InitializeParams, timeoutMs: number): Promise<InitializeResult> {
    this.initParams = params;
    return this.request((c) => c.sendRequest(InitializeRequest.type, params), timeoutMs);
  }

  /** Readies a pooled runner with all that does not depend on its run (see PrepareRequest). */
  async prepare(params: PrepareParams, timeoutMs: number): Promise<PrepareResult> {
    this.prepareParams = params;
    return this.request((c) => c.sendRequest(PrepareRequest.type, params), timeoutMs);
  }

  /**
   * A runner another replica prepared with these same parameters (a shared pool's): this
   * client may `bind` it, and a reconnect after the bind initializes as the run.
   */
  preparedElsewhere(params: PrepareParams): void {
    this.prepareParams = params;
  }

  /** The sandbox's usage as the runner reads it from its own cgroup. */
  async usage(timeoutMs: number): Promise<UsageResult> {
    return this.request((c) => c.sendRequest(UsageRequest.type), timeoutMs);
  }

  /** Binds a prepared runner to its run: the claim's one round trip. */
  async bind(params: BindParams, timeoutMs: number): Promise<InitializeResult> {
    if (!this.prepareParams) throw new Error('bind before prepare');
    // A reconnect from here on initializes as this run (the runner answers it like a repeated bind).
    this.initParams = { ...this.prepareParams, ...params };
    return this.request((c) => c.sendRequest(BindRequest.type, params), timeoutMs);
  }

  /** Which run the runner serves (null: none yet) and how many connections it has. */
  async ping(timeoutMs: number): Promise<{ runId: string | null; connections: number }> {
    return this.request((c) => c.sendRequest(PingRequest.type), timeoutMs);
  }

  /**
   * Has the runner close every socket connection and listener (before a memory checkpoint).
   * The drop that follows is expected: nothing reconnects, the client is done.
   */
  async quiesce(timeoutMs: number): Promise<{ closing: number }> {
    const answer = await this.request((c) => c.sendRequest(QuiesceRequest.type), timeoutMs);
    this.shuttingDown = true;
    return answer;
  }

  async command<P, R>(type: FamilyCommand<P, R>, payload: P): Promise<R> {
    // The runner answers each command with the reply its FamilyCommand declares.
    return this.request((c) =>
      c.sendRequest(CommandRequest.type, { family: type.family, command: type.command, payload }),
    ) as Promise<R>;
  }

  /** A pending request that ends with the runner, or after `timeoutMs` when given. */
  private request<T>(send: (c: MessageConnection) => Promise<T>, timeoutMs?: number): Promise<T> {
    if (this.gone) return Promise.reject(this.gone);
    this.lastActivity = Date.now();
    return new Promise<T>((resolve, reject) => {
      const id = randomUUID();
      // A held timer: a gateway shutting down waits out the runner's grace.
      const timer =
        timeoutMs === undefined
          ? undefined
          : setTimeout(() => reject(new Error(`runner did not answer within ${timeoutMs / 1000}s`)), timeoutMs);
      this.calls.set(id, { hooks: noHooks, reject });
      this.ready
        .then((c) => {
          const entry = this.calls.get(id);
          if (!entry) return undefined;
          entry.on = c;
          return send(c);
        })
        .then((v) => resolve(v as T), reject)
        .finally(() => {
          this.calls.delete(id);
          clearTimeout(timer);
        });
    });
  }

  async callTool(
    tool: string,
    args: Record<string, unknown>,
    surface: CallerSurface,
    hooks: CallHooks,
    signal: AbortSignal,
    traceparent?: string,
  ): Promise<ToolResult> {
    if (this.gone) throw this.gone;
    this.lastActivity = Date.now();
    const callId = randomUUID();
    const cts = new CancellationTokenSource();
    const onAbort = () => cts.cancel();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      return await new Promise<ToolResult>((resolve, reject) => {
        const params: CallToolParams = {
          callId,
          tool,
          arguments: args,
          surface,
          ...(traceparent ? { traceparent } : {}),
        };
        const entry: PendingCall = { hooks, reject };
        const send = (c: MessageConnection) => {
          if (this.calls.get(callId) !== entry) return;
          entry.on = c;
          entry.sent = false;
          c.sendRequest(CallToolRequest.type, params, cts.token).then(({ phases, ...result }) => {
            if (phases) hooks.phases?.(phases);
            resolve(result);
          }, reject);
        };
        entry.resend = () => this.ready.then(send, reject);
        this.calls.set(callId, entry);
        this.ready.then(send, reject);
      });
    } finally {
      signal.removeEventListener('abort', onAbort);
      this.calls.delete(callId);
      cts.dispose();
      this.lastActivity = Date.now();
    }
  }

  get busy(): boolean {
    return this.calls.size > 0;
  }

  /** Tool calls under way (a pause waits for none of the gateway's own requests). */
  get toolCallsInFlight(): number {
    let n = 0;
    for (const c of this.calls.values()) if (c.resend) n++;
    return n;
  }

  async shutdown(timeoutMs = 3000): Promise<void> {
    if (this.gone) return;
    // The runner closes its connections as it exits: that drop is the end, not a cue to reconnect.
    this.shuttingDown = true;
    await this.request((c) => c.sendRequest(ShutdownRequest.type), timeoutMs).catch(() => undefined);
  }

  /** Lets go of the runner on purpose: pending calls end, but nobody is told it failed. */
  dispose(): void {
    this.goneListeners.length = 0;
    this.fail(new RunnerGoneError('the run was stopped'));
  }
}

const noHooks: CallHooks = {
  progress: () => undefined,
  ask: async () => ({ kind: 'unavailable', reason: 'no call to ask on' }),
  bridge: async () => ({ content: [{ type: 'text', text: 'no call to bridge from' }], isError: true }),
};
