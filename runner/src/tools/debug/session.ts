import { promises as fs } from 'node:fs';
import type { DebugProtocol } from '@vscode/debugprotocol';
import { ToolError } from '../../tool';
import type { AdapterCommand, AdapterId, AdapterSpec } from './adapters';
import { DapClosedError, DapRequestError, DapTimeoutError, type DapClient } from './dapClient';
import type { OutputBuffer } from './outputBuffer';
import { ReverseRequests } from './reverseRequests';
import { connectDirect, startAdapter, type AdapterConnection } from './transport';
import { MAX_FRAMES, MAX_VALUE_CHARS, MAX_VARIABLES } from './schemas';
import { untilAborted } from '../../util/timeout';
import { TextTail } from '../../util/cappedTail';

/** Where a stopped thread is. `file` is absolute as the adapter reported it. */
export interface StopLocation {
  function: string;
  file?: string;
  line?: number;
  sourceLine?: string;
}

export interface StopInfo {
  /** Counts stops in this session; references handed out carry it so stale ones are caught. */
  number: number;
  reason: string;
  threadId?: number;
  description?: string;
  location?: StopLocation;
}

export type Outcome =
  | { kind: 'stopped'; stop: StopInfo }
  | { kind: 'ended'; exitCode?: number; reason: string }
  | { kind: 'running'; waitedMs: number };

/** The end reason when the adapter reports the program's end (rather than a crash or the TTL). */
export const PROGRAM_ENDED = 'the program ended';

export type SessionState = 'running' | 'stopped' | 'ended';

/** How the session sees source files: only workspace files are read, for the source line. */
export interface SourceView {
  sourceLine(absFile: string, line: number): Promise<string | undefined>;
}

export interface Timeouts {
  requestMs: number;
  launchMs: number;
}

export type Start =
  | { kind: 'launch'; program: string; args: string[]; cwd: string; scratchDir: string }
  | { kind: 'attach'; port: number; cwd: string };

export interface SessionOptions {
  id: string;
  spec: AdapterSpec;
  command?: AdapterCommand;
  start: Start;
  /** absolute file → lines, sent at configuration time. */
  breakpoints: Map<string, number[]>;
  output: OutputBuffer;
  timeouts: Timeouts;
  source: SourceView;
}

export interface BreakpointResult {
  /** The adapter's id for it, for later `breakpoint` events. */
  id?: number;
  requestedLine: number;
  verified: boolean;
  line?: number;
  message?: string;
}

export interface FrameView {
  id: number;
  name: string;
  file?: string;
  line?: number;
}

export interface VariableView {
  name: string;
  value: string;
  type?: string;
  /** Non-zero when the value has children to ask `variables` for. */
  reference: number;
  truncated: boolean;
}

export function cut(value: string, max = MAX_VALUE_CHARS): { text: string; truncated: boolean } {
  return value.length > max ? { text: `${value.slice(0, max)}…`, truncated: true } : { text: value, truncated: false };
}

/**
 * One debug adapter and the program under it: the DAP handshake in the adapter's own order,
 * the run/stop state machine, and the bookkeeping that turns a stale frame id or variables
 * reference into a clear error instead of a wrong answer from a reused number.
 */
export class DebugSession {
  readonly startedAt = Date.now();
  state: SessionState = 'running';
  lastStop: StopInfo | undefined;
  endReason: string | undefined;
  exitCode: number | undefined;
  /** What the adapter said about each file's breakpoints, last time they were sent. */
  readonly breakpointStatus = new Map<string, BreakpointResult[]>();
  private stopCount = 0;
  private capabilities: DebugProtocol.Capabilities = {};
  private readonly frames = new Map<number, number>();
  private readonly references = new Map<number, number>();
  private readonly waiters = new Set<(o: Outcome) => void>();
  private readonly consoleTail = new TextTail(4096);
  private readonly reverse: ReverseRequests;
  private conn!: AdapterConnection;

  private constructor(private readonly opts: SessionOptions) {
    this.reverse = new ReverseRequests(opts.output);
  }

  get id(): string {
    return this.opts.id;
  }
  get adapter(): AdapterId {
    return this.opts.spec.id;
  }
  get start(): Start {
    return this.opts.start;
  }
  get adapterPid(): number | undefined {
    return this.conn?.pid;
  }
  private get client(): DapClient {
    return this.conn.client;
  }

  /**
   * Starts the adapter, runs the handshake, and waits up to `boundMs` for the first stop or
   * the end of the program. On any failure the adapter is gone before this throws.
   */
  static async open(
    opts: SessionOptions,
    boundMs: number,
    signal: AbortSignal,
  ): Promise<{ session: DebugSession; outcome: Outcome }> {
    const session = new DebugSession(opts);
    const { spec, start } = opts;
    try {
      if (start.kind === 'attach' && spec.attachVia === 'direct') {
        session.conn = await connectDirect(start.port, session.reverse.handler);
      } else {
        if (!opts.command) throw new Error(`no command to start ${spec.id}`);
        session.conn = await startAdapter(opts.command, start.cwd, session.reverse.handler, (category, text) =>
          opts.output.push(category, text),
        );
      }
    } catch (err) {
      const hint = start.kind === 'attach' ? ` Is a debuggee listening on port ${start.port} inside the sandbox?` : '';
      throw new ToolError(`${start.kind} failed: ${(err as Error).message}.${hint}`);
    }
    session.listen();
    try {
      const first = session.nextOutcome();
      await session.handshake();
      return { session, outcome: await session.settle(first, boundMs, signal) };
    } catch (err) {
      await session.close();
      throw session.withDetails(session.explain(err, start.kind));
    }
  }

  /** A failed start often explains itself only in its output (dlv's build errors): add it. */
  private withDetails(err: Error): Error {
    const details = [this.opts.output.tail(1500), this.consoleTail.text().trim().slice(-1000)]
      .filter(Boolean)
      .join('\n');
    return details ? new ToolError(`${err.message}\n--- output ---\n${details}`) : err;
  }

  private listen(): void {
    this.client.onEvent((e) => this.onEvent(e));
    void this.conn.ended.then((reason) => this.markEnded(this.endReason ?? reason));
  }

  private onEvent(e: DebugProtocol.Event): void {
    switch (e.event) {
      case 'stopped': {
        const body = (e as DebugProtocol.StoppedEvent).body;
        this.stopCount += 1;
        this.state = 'stopped';
        this.lastStop = {
          number: this.stopCount,
          reason: body.reason,
          threadId: body.threadId ?? this.lastStop?.threadId,
          description: body.description ?? body.text,
        };
        this.notify({ kind: 'stopped', stop: this.lastStop });
        return;
      }
      case 'continued':
        if (this.state === 'stopped') this.state = 'running';
        return;
      case 'exited':
        this.exitCode = (e as DebugProtocol.ExitedEvent).body.exitCode;
        return;
      case 'terminated':
        this.markEnded(PROGRAM_ENDED);
        return;
      case 'output': {
        const body = (e as DebugProtocol.OutputEvent).body;
        if (body.category === 'stdout' || body.category === 'stderr') this.opts.output.push(body.category, body.output);
        else if (body.category !== 'telemetry') this.consoleTail.push(body.output ?? '');
        return;
      }
      case 'breakpoint': {
        const bp = (e as DebugProtocol.BreakpointEvent).body.breakpoint;
        for (const results of this.breakpointStatus.values()) {
          const hit = bp.id === undefined ? undefined : results.find((r) => r.id === bp.id);
          if (hit) Object.assign(hit, { verified: bp.verified, line: bp.line ?? hit.line, message: bp.message });
        }
        return;
      }
    }
  }

  private markEnded(reason: string): void {
    if (this.state === 'ended') return;
    this.state = 'ended';
    // A reason given beforehand (the TTL, a terminate) is the true one; the adapter's own
    // "terminated" that follows the disconnect is only its consequence.
    this.endReason ??= reason;
    this.notify({ kind: 'ended', reason: this.endReason, exitCode: this.exitCode });
  }

  private notify(o: Outcome): void {
    for (const w of [...this.waiters]) w(o);
  }

  /** Registers for the next stop or end *before* the request that causes it is sent. */
  private nextOutcome(): { promise: Promise<Outcome>; cancel(): void } {
    let waiter!: (o: Outcome) => void;
    const promise = new Promise<Outcome>((resolve) => {
      waiter = (o) => {
        this.waiters.delete(waiter);
        resolve(o);
      };
      this.waiters.add(waiter);
    });
    if (this.state === 'ended')
      waiter({ kind: 'ended', reason: this.endReason ?? 'the session ended', exitCode: this.exitCode });
    return { promise, cancel: () => this.waiters.delete(waiter) };
  }

  private waitForEvent(name: string, timeoutMs: number): Promise<DebugProtocol.Event> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        off();
        reject(new DapTimeoutError(`(the "${name}" event)`, timeoutMs));
      }, timeoutMs);
      const off = this.client.onEvent((e) => {
        if (e.event !== name) return;
        clearTimeout(timer);
        off();
        resolve(e);
      });
      this.client.onClose((reason) => {
        clearTimeout(timer);
        off();
        reject(new DapClosedError(reason));
      });
    });
  }

  private async handshake(): Promise<void> {
    const { spec, start, timeouts } = this.opts;
    const initialized = this.waitForEvent('initialized', timeouts.launchMs);
    initialized.catch(() => undefined);
    const init = await this.client.request(
      'initialize',
      {
        clientID: 'tether',
        clientName: 'tether',
        adapterID: spec.adapterID ?? spec.id,
        locale: 'en',
        pathFormat: 'path',
        linesStartAt1: true,
        columnsStartAt1: true,
        supportsVariableType: true,
        supportsRunInTerminalRequest: true,
        supportsStartDebuggingRequest: false,
      },
      timeouts.requestMs,
    );
    this.capabilities = init.body ?? {};
    const begin = () =>
      start.kind === 'launch'
        ? this.client.request(
            'launch',
            spec.launchArguments({ ...start, command: this.opts.command! }),
            timeouts.launchMs,
          )
        : this.client.request('attach', spec.attachArguments(start.port, this.opts.command), timeouts.launchMs);
    if (spec.handshake === 'configure-then-launch') {
      await initialized;
      await this.configure();
      await begin();
      return;
    }
    const started = begin();
    started.catch(() => undefined);
    await Promise.race([initialized, started.then(() => initialized)]);
    await this.configure();
    await started;
  }

  /** Breakpoints, the adapter's default exception filters, then configurationDone. */
  private async configure(): Promise<void> {
    for (const [file, lines] of this.opts.breakpoints) await this.setBreakpoints(file, lines);
    const filters = (this.capabilities.exceptionBreakpointFilters ?? []).filter((f) => f.default).map((f) => f.filter);
    if (this.capabilities.exceptionBreakpointFilters) {
      await this.client.request('setExceptionBreakpoints', { filters }, this.opts.timeouts.requestMs);
    }
    if (this.capabilities.supportsConfigurationDoneRequest)
      await this.client.request('configurationDone', {}, this.opts.timeouts.requestMs);
  }

  async setBreakpoints(file: string, lines: number[]): Promise<BreakpointResult[]> {
    const res = await this.client.request(
      'setBreakpoints',
      { source: { path: file }, breakpoints: lines.map((line) => ({ line })) },
      this.opts.timeouts.requestMs,
    );
    const results = lines.map((requestedLine, i): BreakpointResult => {
      const bp = res.body.breakpoints[i];
      return { id: bp?.id, requestedLine, verified: !!bp?.verified, line: bp?.line, message: bp?.message };
    });
    if (lines.length === 0) this.breakpointStatus.delete(file);
    else this.breakpointStatus.set(file, results);
    return results;
  }

  /** Waits for the outcome, then describes a stop (top frame and its source line). */
  private async settle(
    wait: { promise: Promise<Outcome>; cancel(): void },
    boundMs: number,
    signal: AbortSignal,
  ): Promise<Outcome> {
    const t0 = Date.now();
    const stillRunning = (): Outcome => ({ kind: 'running', waitedMs: Date.now() - t0 });
    const outcome = await untilAborted(
      wait.promise,
      AbortSignal.any([signal, AbortSignal.timeout(boundMs)]),
      stillRunning,
    );
    wait.cancel();
    if (outcome.kind === 'stopped') await this.locate(outcome.stop);
    return outcome;
  }

  /** Fills in where a stop is, once; the top frame's id becomes valid for this stop. */
  async locate(stop: StopInfo): Promise<void> {
    if (stop.location || stop.threadId === undefined || this.state !== 'stopped' || stop.number !== this.stopCount)
      return;
    try {
      const res = await this.client.request(
        'stackTrace',
        { threadId: stop.threadId, startFrame: 0, levels: 1 },
        this.opts.timeouts.requestMs,
      );
      const top = res.body.stackFrames[0];
      if (!top) return;
      this.frames.set(top.id, stop.number);
      const file = top.source?.path;
      if (stop.reason === 'exception' && this.capabilities.supportsExceptionInfoRequest)
        stop.description = await this.exceptionText(stop);
      stop.location = {
        function: top.name,
        file,
        line: top.line || undefined,
        sourceLine: file && top.line ? await this.opts.source.sourceLine(file, top.line) : undefined,
      };
    } catch {
      // A stop without a readable frame is still a stop; the caller reports what it has.
    }
  }

  /** "SystemExit: 7" rather than the bare "7" some adapters put in the stopped event. */
  private async exceptionText(stop: StopInfo): Promise<string | undefined> {
    try {
      const info = (
        await this.client.request('exceptionInfo', { threadId: stop.threadId! }, this.opts.timeouts.requestMs)
      ).body;
      const text =
        info.description && info.description !== info.exceptionId
          ? `${info.exceptionId}: ${info.description}`
          : info.exceptionId;
      return cut(text).text;
    } catch {
      return stop.description;
    }
  }

  private requireStopped(what: string): StopInfo {
    if (this.state === 'ended') throw new ToolError(`the session has ended (${this.endReason}); launch again`);
    if (this.state !== 'stopped' || !this.lastStop) {
      throw new ToolError(
        `${what} needs a stopped program, and it is running: call debug with op "pause", or "status" to see whether it has stopped`,
      );
    }
    return this.lastStop;
  }

  private threadOr(threadId: number | undefined): number | undefined {
    return threadId ?? this.lastStop?.threadId;
  }

  private async anyThread(threadId: number | undefined): Promise<number> {
    const known = this.threadOr(threadId);
    if (known !== undefined) return known;
    const threads = await this.threads();
    if (threads.length === 0) throw new ToolError('the program has no threads to act on');
    return threads[0].id;
  }

  /** continue / next / stepIn / stepOut, blocking until the next stop or end, up to the bound. */
  async resume(
    kind: 'continue' | 'next' | 'stepIn' | 'stepOut',
    threadId: number | undefined,
    boundMs: number,
    signal: AbortSignal,
  ): Promise<Outcome> {
    const stop = this.requireStopped(kind === 'continue' ? 'continue' : 'a step');
    const thread = threadId ?? stop.threadId ?? (await this.anyThread(undefined));
    const wait = this.nextOutcome();
    this.state = 'running';
    try {
      await this.client.request(kind, { threadId: thread }, this.opts.timeouts.requestMs);
    } catch (err) {
      wait.cancel();
      if (this.state === 'running' && !(err instanceof DapClosedError)) this.state = 'stopped';
      throw this.explain(err, kind);
    }
    return this.settle(wait, boundMs, signal);
  }

  async pause(threadId: number | undefined, boundMs: number, signal: AbortSignal): Promise<Outcome> {
    if (this.state === 'ended') throw new ToolError(`the session has ended (${this.endReason}); launch again`);
    if (this.state === 'stopped' && this.lastStop) {
      await this.locate(this.lastStop);
      return { kind: 'stopped', stop: this.lastStop };
    }
    const thread = await this.anyThread(threadId);
    const wait = this.nextOutcome();
    try {
      await this.client.request('pause', { threadId: thread }, this.opts.timeouts.requestMs);
    } catch (err) {
      wait.cancel();
      throw this.explain(err, 'pause');
    }
    return this.settle(wait, boundMs, signal);
  }

  /** After "still running": waits again for a stop that may have happened meanwhile. */
  async current(): Promise<Outcome> {
    if (this.state === 'ended')
      return { kind: 'ended', reason: this.endReason ?? 'the session ended', exitCode: this.exitCode };
    if (this.state === 'stopped' && this.lastStop) {
      await this.locate(this.lastStop);
      return { kind: 'stopped', stop: this.lastStop };
    }
    return { kind: 'running', waitedMs: 0 };
  }

  async threads(): Promise<DebugProtocol.Thread[]> {
    if (this.state === 'ended') throw new ToolError(`the session has ended (${this.endReason}); launch again`);
    try {
      return (await this.client.request('threads', undefined, this.opts.timeouts.requestMs)).body.threads;
    } catch (err) {
      throw this.explain(err, 'threads');
    }
  }

  async stack(threadId: number | undefined): Promise<{ threadId: number; frames: FrameView[]; totalFrames?: number }> {
    const stop = this.requireStopped('stack');
    const thread = threadId ?? stop.threadId ?? (await this.anyThread(undefined));
    let res: DebugProtocol.StackTraceResponse;
    try {
      res = await this.client.request(
        'stackTrace',
        { threadId: thread, startFrame: 0, levels: MAX_FRAMES },
        this.opts.timeouts.requestMs,
      );
    } catch (err) {
      throw this.explain(err, 'stack');
    }
    const frames = res.body.stackFrames.slice(0, MAX_FRAMES).map((f) => {
      this.frames.set(f.id, stop.number);
      return { id: f.id, name: f.name, file: f.source?.path, line: f.line || undefined };
    });
    return { threadId: thread, frames, totalFrames: res.body.totalFrames };
  }

  /** Refuses a frame id that is unknown, or from an earlier stop, before the adapter sees it. */
  private checkFrame(frameId: number): void {
    const stop = this.requireStopped('this op');
    const at = this.frames.get(frameId);
    if (at === stop.number) return;
    if (at !== undefined) {
      throw new ToolError(
        `frame ${frameId} is from an older stop (#${at}); the program has moved since (now stop #${stop.number}). Call debug op "stack" again for the current frames`,
      );
    }
    throw new ToolError(
      `frame ${frameId} does not exist in this stop; call debug op "stack" for the frame ids of stop #${stop.number}`,
    );
  }

  private checkReference(reference: number): void {
    const stop = this.requireStopped('variables');
    const at = this.references.get(reference);
    if (at === stop.number) return;
    if (at !== undefined) {
      throw new ToolError(
        `reference ${reference} is from an older stop (#${at}); the program has moved since (now stop #${stop.number}). Call "stack" and "scopes" again for fresh references`,
      );
    }
    throw new ToolError(
      `reference ${reference} does not exist in this stop; references come from "scopes", "variables" or "evaluate" results of stop #${stop.number}`,
    );
  }

  async scopes(frameId: number): Promise<{ name: string; reference: number; expensive: boolean }[]> {
    this.checkFrame(frameId);
    const stop = this.lastStop!;
    try {
      const res = await this.client.request('scopes', { frameId }, this.opts.timeouts.requestMs);
      return res.body.scopes.map((s) => {
        if (s.variablesReference) this.references.set(s.variablesReference, stop.number);
        return { name: s.name, reference: s.variablesReference, expensive: s.expensive };
      });
    } catch (err) {
      throw this.explain(err, 'scopes');
    }
  }

  async variables(reference: number): Promise<{ variables: VariableView[]; total: number }> {
    this.checkReference(reference);
    const stop = this.lastStop!;
    let res: DebugProtocol.VariablesResponse;
    try {
      res = await this.client.request('variables', { variablesReference: reference }, this.opts.timeouts.requestMs);
    } catch (err) {
      throw this.explain(err, 'variables');
    }
    const all = res.body.variables;
    const variables = all.slice(0, MAX_VARIABLES).map((v) => {
      if (v.variablesReference) this.references.set(v.variablesReference, stop.number);
      const value = cut(v.value);
      return {
        name: v.name,
        value: value.text,
        type: v.type || undefined,
        reference: v.variablesReference,
        truncated: value.truncated,
      };
    });
    return { variables, total: all.length };
  }

  async evaluate(
    expression: string,
    frameId: number | undefined,
  ): Promise<{ frameId: number; value: string; type?: string; reference: number; truncated: boolean }> {
    const stop = this.requireStopped('evaluate');
    let frame = frameId;
    if (frame === undefined) {
      await this.locate(stop);
      frame = [...this.frames].find(([, n]) => n === stop.number)?.[0];
      if (frame === undefined)
        throw new ToolError('no frame to evaluate in: call debug op "stack" and pass a frame_id');
    } else {
      this.checkFrame(frame);
    }
    try {
      const res = await this.client.request(
        'evaluate',
        { expression, frameId: frame, context: this.opts.spec.evaluateContext },
        this.opts.timeouts.requestMs,
      );
      if (res.body.variablesReference) this.references.set(res.body.variablesReference, stop.number);
      const value = cut(res.body.result);
      return {
        frameId: frame,
        value: value.text,
        type: res.body.type || undefined,
        reference: res.body.variablesReference,
        truncated: value.truncated,
      };
    } catch (err) {
      if (err instanceof DapRequestError)
        throw new ToolError(
          `evaluating ${JSON.stringify(expression)} in frame ${frame} failed:\n${err.message.trim()}`,
        );
      throw this.explain(err, 'evaluate');
    }
  }

  /** Output the adapter printed about the program's end ("exited with status 3"), when no `exited` event said it. */
  private exitCodeFromConsole(): number | undefined {
    const m = /exited with status\s*=?\s*(-?\d+)/i.exec(this.consoleTail.text());
    return m ? Number(m[1]) : undefined;
  }

  /**
   * Ends the session: a polite disconnect (ending a launched program; leaving an attached one
   * running), then the adapter's process group is killed whatever it answered.
   */
  async close(): Promise<void> {
    if (!this.conn) return;
    if (!this.client.closed) {
      await this.client
        .request('disconnect', { terminateDebuggee: this.opts.start.kind === 'launch' }, 3000)
        .catch(() => undefined);
    }
    this.exitCode ??= this.exitCodeFromConsole();
    this.conn.kill();
    this.reverse.killAll();
    this.markEnded(this.endReason ?? 'the session was terminated');
    if (this.opts.start.kind === 'launch') await fs.rm(this.opts.start.scratchDir, { recursive: true, force: true });
  }

  /** Turns protocol failures into errors a model can act on. */
  private explain(err: unknown, what: string): Error {
    if (err instanceof ToolError) return err;
    if (err instanceof DapRequestError)
      return new ToolError(`${what} failed: the debug adapter said: ${err.message.trim()}`);
    if (err instanceof DapClosedError)
      return new ToolError(`${what} failed: session ${this.id} ended: ${this.endReason ?? err.message}`);
    if (err instanceof DapTimeoutError) return new ToolError(`${what} failed: ${err.message}`);
    return new ToolError(`${what} failed: ${(err as Error).message ?? String(err)}`);
  }
}
