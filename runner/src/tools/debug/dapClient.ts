import type { Readable, Writable } from 'node:stream';
import type { DebugProtocol } from '@vscode/debugprotocol';
import { encodeMessage, MessageDecoder } from './framing';
import { phase } from '../../util/phases';

/** Request command → [arguments, response] of the DAP requests this client sends. */
export interface DapRequests {
  initialize: [DebugProtocol.InitializeRequestArguments, DebugProtocol.InitializeResponse];
  launch: [DebugProtocol.LaunchRequestArguments, DebugProtocol.LaunchResponse];
  attach: [DebugProtocol.AttachRequestArguments, DebugProtocol.AttachResponse];
  setBreakpoints: [DebugProtocol.SetBreakpointsArguments, DebugProtocol.SetBreakpointsResponse];
  setExceptionBreakpoints: [
    DebugProtocol.SetExceptionBreakpointsArguments,
    DebugProtocol.SetExceptionBreakpointsResponse,
  ];
  configurationDone: [DebugProtocol.ConfigurationDoneArguments, DebugProtocol.ConfigurationDoneResponse];
  continue: [DebugProtocol.ContinueArguments, DebugProtocol.ContinueResponse];
  pause: [DebugProtocol.PauseArguments, DebugProtocol.PauseResponse];
  next: [DebugProtocol.NextArguments, DebugProtocol.NextResponse];
  stepIn: [DebugProtocol.StepInArguments, DebugProtocol.StepInResponse];
  stepOut: [DebugProtocol.StepOutArguments, DebugProtocol.StepOutResponse];
  threads: [undefined, DebugProtocol.ThreadsResponse];
  stackTrace: [DebugProtocol.StackTraceArguments, DebugProtocol.StackTraceResponse];
  scopes: [DebugProtocol.ScopesArguments, DebugProtocol.ScopesResponse];
  variables: [DebugProtocol.VariablesArguments, DebugProtocol.VariablesResponse];
  evaluate: [DebugProtocol.EvaluateArguments, DebugProtocol.EvaluateResponse];
  exceptionInfo: [DebugProtocol.ExceptionInfoArguments, DebugProtocol.ExceptionInfoResponse];
  disconnect: [DebugProtocol.DisconnectArguments, DebugProtocol.DisconnectResponse];
  terminate: [DebugProtocol.TerminateArguments, DebugProtocol.TerminateResponse];
}
export type DapCommand = keyof DapRequests;

/** An adapter answered a request with success: false. The message is the adapter's own. */
export class DapRequestError extends Error {
  constructor(
    readonly command: string,
    message: string,
  ) {
    super(message);
    this.name = 'DapRequestError';
  }
}

/** The connection to the adapter is gone (it exited, or the stream broke). */
export class DapClosedError extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = 'DapClosedError';
  }
}

/** The adapter did not answer a request in time. */
export class DapTimeoutError extends Error {
  constructor(
    readonly command: string,
    ms: number,
  ) {
    super(`the debug adapter did not answer "${command}" within ${Math.round(ms / 1000)}s`);
    this.name = 'DapTimeoutError';
  }
}

/** Answers a request the adapter sends to us (runInTerminal, startDebugging): the response body, or throw to refuse. */
export type ReverseRequestHandler = (request: DebugProtocol.Request) => Promise<unknown>;

interface Pending {
  command: string;
  resolve(r: DebugProtocol.Response): void;
  reject(e: Error): void;
  timer: NodeJS.Timeout;
}

/**
 * A Debug Adapter Protocol client over any byte stream pair (an adapter's stdio, or a socket
 * for adapters that only listen on a port). Matches responses by request_seq, fans events out
 * to listeners and answers the adapter's reverse requests through one handler.
 */
export class DapClient {
  private seq = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly listeners = new Set<(event: DebugProtocol.Event) => void>();
  private readonly decoder = new MessageDecoder();
  private closedReason: string | undefined;
  private readonly closeListeners = new Set<(reason: string) => void>();

  /**
   * `why`, when given, explains the end of the input stream (an adapter process's exit status
   * says more than "closed its connection"); it is waited for briefly.
   */
  constructor(
    input: Readable,
    private readonly output: Writable,
    private readonly reverse: ReverseRequestHandler,
    why?: Promise<string>,
  ) {
    input.on('data', (chunk: Buffer) => {
      let messages: DebugProtocol.ProtocolMessage[];
      try {
        messages = this.decoder.push(chunk);
      } catch (err) {
        this.close(`the debug adapter sent an unreadable message: ${(err as Error).message}`);
        return;
      }
      for (const m of messages) this.dispatch(m);
    });
    // A pipe's end or a refused write usually means the adapter died: its exit says how, and
    // is waited for a moment before the plainer reason is given.
    const closeFor = (plain: string) => {
      if (!why) return this.close(plain);
      const timer = setTimeout(() => this.close(plain), 1000);
      void why.then((reason) => {
        clearTimeout(timer);
        this.close(reason);
      });
    };
    input.on('end', () => closeFor('the debug adapter closed its connection'));
    input.on('error', (err) => this.close(`the debug adapter connection failed: ${err.message}`));
    output.on('error', (err) => closeFor(`writing to the debug adapter failed: ${err.message}`));
  }

  get closed(): string | undefined {
    return this.closedReason;
  }

  request<C extends DapCommand>(command: C, args: DapRequests[C][0], timeoutMs: number): Promise<DapRequests[C][1]> {
    return phase('dap.request', { 'dap.command': command }, () => this.send(command, args, timeoutMs));
  }

  private send<C extends DapCommand>(
    command: C,
    args: DapRequests[C][0],
    timeoutMs: number,
  ): Promise<DapRequests[C][1]> {
    if (this.closedReason) return Promise.reject(new DapClosedError(this.closedReason));
    const seq = this.seq++;
    return new Promise<DapRequests[C][1]>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(seq);
        reject(new DapTimeoutError(command, timeoutMs));
      }, timeoutMs);
      this.pending.set(seq, { command, resolve: resolve as (r: DebugProtocol.Response) => void, reject, timer });
      const message: DebugProtocol.Request = {
        seq,
        type: 'request',
        command,
        ...(args === undefined ? {} : { arguments: args }),
      };
      this.write(message);
    });
  }

  onEvent(listener: (event: DebugProtocol.Event) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  onClose(listener: (reason: string) => void): void {
    if (this.closedReason) listener(this.closedReason);
    else this.closeListeners.add(listener);
  }

  /** Fails every pending request with the reason; later requests fail at once. */
  close(reason: string): void {
    if (this.closedReason) return;
    this.closedReason = reason;
    for (const [seq, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(new DapClosedError(reason));
      this.pending.delete(seq);
    }
    for (const l of this.closeListeners) l(reason);
    this.closeListeners.clear();
  }

  private write(message: DebugProtocol.ProtocolMessage): void {
    if (this.closedReason) return;
    this.output.write(encodeMessage(message));
  }

  private dispatch(message: DebugProtocol.ProtocolMessage): void {
    switch (message.type) {
      case 'response': {
        const r = message as DebugProtocol.Response;
        const p = this.pending.get(r.request_seq);
        if (!p) return;
        this.pending.delete(r.request_seq);
        clearTimeout(p.timer);
        if (r.success) p.resolve(r);
        else p.reject(new DapRequestError(p.command, responseError(r)));
        return;
      }
      case 'event':
        for (const l of [...this.listeners]) l(message as DebugProtocol.Event);
        return;
      case 'request':
        void this.answer(message as DebugProtocol.Request);
        return;
    }
  }

  private async answer(request: DebugProtocol.Request): Promise<void> {
    const base = { seq: this.seq++, type: 'response' as const, request_seq: request.seq, command: request.command };
    try {
      const body = await this.reverse(request);
      this.write({ ...base, success: true, body } as DebugProtocol.Response);
    } catch (err) {
      this.write({ ...base, success: false, message: (err as Error).message } as DebugProtocol.Response);
    }
  }
}

/** The adapter's own words for a failed request: the formatted error body when there is one. */
function responseError(r: DebugProtocol.Response): string {
  const body = r.body as { error?: DebugProtocol.Message } | undefined;
  const err = body?.error;
  if (err?.format) {
    return err.format.replace(/\{(\w+)\}/g, (_, k: string) => String(err.variables?.[k] ?? `{${k}}`));
  }
  return r.message || `${r.command} failed`;
}
