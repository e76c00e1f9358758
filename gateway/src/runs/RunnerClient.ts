import { randomUUID } from 'node:crypto';
import {
  CancellationTokenSource,
  createMessageConnection,
  StreamMessageReader,
  StreamMessageWriter,
  type MessageConnection,
} from 'vscode-jsonrpc/node';
import { AskRequest, BridgeRequest, ProgressNotification, type QuestionCard, type QuestionOutcome } from '../../../protocol/src/calls';
import {
  CommandRequest,
  InitializeRequest,
  RunEventNotification,
  ShutdownRequest,
  type FamilyCommand,
  type InitializeParams,
  type InitializeResult,
  type RunEventParams,
  type RunEventType,
} from '../../../protocol/src/run';
import { CallToolRequest, type CallToolParams, type CallerSurface, type ToolResult } from '../../../protocol/src/tools';
import type { Sandbox } from '../sandbox/provider';
import { logger } from '../log';

/** What the gateway does for a call while the runner works on it. */
export interface CallHooks {
  progress(text: string): void;
  ask(card: QuestionCard): Promise<QuestionOutcome>;
  bridge(tool: string, args: unknown): Promise<ToolResult>;
}

export class RunnerGoneError extends Error {}

/** The gateway's end of one runner's JSON-RPC connection. */
export class RunnerClient {
  private readonly connection: MessageConnection;
  private readonly calls = new Map<string, { hooks: CallHooks; reject: (e: Error) => void }>();
  private gone: Error | undefined;
  private readonly eventListeners: ((e: RunEventParams) => void)[] = [];
  private readonly goneListeners: ((err: Error) => void)[] = [];
  lastActivity = Date.now();

  constructor(readonly sandbox: Sandbox) {
    this.connection = createMessageConnection(new StreamMessageReader(sandbox.stdout), new StreamMessageWriter(sandbox.stdin));
    this.connection.onNotification(ProgressNotification.type, (p) => this.calls.get(p.callId)?.hooks.progress(p.text));
    this.connection.onRequest(AskRequest.type, async (p) => {
      const call = this.calls.get(p.callId);
      if (!call) return { kind: 'unavailable', reason: 'the call that asked has ended' };
      return call.hooks.ask(p.card);
    });
    this.connection.onRequest(BridgeRequest.type, async (p) => {
      const call = this.calls.get(p.callId);
      if (!call) return { content: [{ type: 'text', text: 'the call that made this bridged call has ended' }], isError: true };
      return call.hooks.bridge(p.tool, p.arguments);
    });
    this.connection.onNotification(RunEventNotification.type, (e) => this.eventListeners.forEach((l) => l(e)));
    this.connection.onError(([err]) => logger.warn({ runId: sandbox.runId, err: err.message }, 'runner connection error'));
    this.connection.onClose(() => this.fail(new RunnerGoneError('the runner connection closed')));
    this.connection.listen();
    void sandbox.exited.then((exit) => this.fail(new RunnerGoneError(exit.reason)));
  }

  /** Ends every pending call at once: a dead runner must never leave a client waiting. */
  private fail(err: Error): void {
    if (this.gone) return;
    this.gone = err;
    for (const c of this.calls.values()) c.reject(err);
    this.calls.clear();
    this.connection.dispose();
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
    return this.request(this.connection.sendRequest(InitializeRequest.type, params), timeoutMs);
  }

  async command<P, R>(type: FamilyCommand<P, R>, payload: P): Promise<R> {
    // The runner answers each command with the reply its FamilyCommand declares.
    return this.request(this.connection.sendRequest(CommandRequest.type, { family: type.family, command: type.command, payload })) as Promise<R>;
  }

  /** A pending request that ends with the runner, or after `timeoutMs` when given. */
  private request<T>(p: Promise<T>, timeoutMs?: number): Promise<T> {
    if (this.gone) return Promise.reject(this.gone);
    this.lastActivity = Date.now();
    return new Promise<T>((resolve, reject) => {
      const id = randomUUID();
      // A held timer: a gateway shutting down waits out the runner's grace.
      const timer = timeoutMs === undefined ? undefined : setTimeout(() => reject(new Error(`runner did not answer within ${timeoutMs / 1000}s`)), timeoutMs);
      this.calls.set(id, { hooks: noHooks, reject });
      p.then(resolve, reject).finally(() => {
        this.calls.delete(id);
        clearTimeout(timer);
      });
    });
  }

  async callTool(tool: string, args: Record<string, unknown>, surface: CallerSurface, hooks: CallHooks, signal: AbortSignal, traceparent?: string): Promise<ToolResult> {
    if (this.gone) throw this.gone;
    this.lastActivity = Date.now();
    const callId = randomUUID();
    const cts = new CancellationTokenSource();
    const onAbort = () => cts.cancel();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      return await new Promise<ToolResult>((resolve, reject) => {
        this.calls.set(callId, { hooks, reject });
        const params: CallToolParams = { callId, tool, arguments: args, surface, ...(traceparent ? { traceparent } : {}) };
        this.connection.sendRequest(CallToolRequest.type, params, cts.token).then(resolve, reject);
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

  async shutdown(timeoutMs = 3000): Promise<void> {
    if (this.gone) return;
    await this.request(this.connection.sendRequest(ShutdownRequest.type), timeoutMs).catch(() => undefined);
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
