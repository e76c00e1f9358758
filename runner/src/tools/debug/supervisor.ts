import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { ToolError } from '../../tool';
import type { Workspace } from '../../workspace';
import type { AdapterId, AdapterSpec } from './adapters';
import { adapterForFile, whyUnavailable, workspaceAdapters, type Availability } from './availability';
import { OutputBuffer } from './outputBuffer';
import { makeScratchDir } from './scratch';
import { activeAdapters, adapterSpec, candidatesFor, describeTried } from './table';
import {
  DebugSession,
  PROGRAM_ENDED,
  type BreakpointResult,
  type Outcome,
  type SourceView,
  type Start,
} from './session';
import { MAX_VALUE_CHARS } from './schemas';

export interface DebugSettings {
  /** Hard lifetime of a session. */
  ttlSeconds: number;
  /** Default bound for launch/continue/steps before "still running". */
  waitSeconds: number;
  requestTimeoutSeconds: number;
  /** Bound on the start-up handshake (delve builds the program inside it). */
  launchTimeoutSeconds: number;
  /** Cap of the debuggee output ring buffer, in characters. */
  outputChars: number;
}

export const DEFAULT_DEBUG_SETTINGS: DebugSettings = {
  ttlSeconds: 30 * 60,
  waitSeconds: 30,
  requestTimeoutSeconds: 15,
  launchTimeoutSeconds: 120,
  outputChars: 64 * 1024,
};

export interface BreakpointsOutcome {
  file: string;
  lines: number[];
  /** Absent when no session is live: the breakpoints wait for the next launch. */
  results?: BreakpointResult[];
}

export interface Started {
  session: DebugSession;
  outcome: Outcome;
  availability: Availability;
}

/**
 * The debug sessions of one conversation: at most one live session, a hard TTL, breakpoints
 * kept across sessions, and every call serialized (a `continue` must not overtake a `stack`).
 */
export class DebugSupervisor {
  readonly breakpoints = new Map<string, number[]>();
  readonly output: OutputBuffer;
  private session: DebugSession | undefined;
  private ttlTimer: NodeJS.Timeout | undefined;
  private sessionCount = 0;
  private queue: Promise<unknown> = Promise.resolve();
  /** How the previous session ended when it was not terminated on request; told once. */
  private endedNote: string | undefined;

  constructor(
    readonly conversationId: string,
    private readonly workspace: Workspace,
    readonly settings: DebugSettings,
  ) {
    this.output = new OutputBuffer(settings.outputChars);
  }

  /** Runs calls one at a time, in arrival order. */
  serialize<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.queue.then(fn, fn);
    this.queue = next.catch(() => undefined);
    return next;
  }

  get live(): DebugSession | undefined {
    return this.session;
  }

  /** The note about a session that ended by itself, handed out once. */
  takeEndedNote(): string | undefined {
    const note = this.endedNote;
    this.endedNote = undefined;
    return note;
  }

  /** The live session; a session that ended by itself is cleaned up here and reported. */
  async require(): Promise<DebugSession> {
    await this.reapEnded();
    if (this.session) return this.session;
    const note = this.takeEndedNote();
    throw new ToolError(
      `no debug session is running${note ? ` (${note})` : ''}; start one with op "launch" or "attach"`,
    );
  }

  async reapEnded(): Promise<void> {
    if (this.session && this.session.state === 'ended') await this.retire(this.session);
  }

  displayPath(abs: string): string {
    const rel = path.relative(this.workspace.root, abs);
    if (rel === '') return '.';
    return !rel.startsWith('..') && !path.isAbsolute(rel) ? rel.split(path.sep).join('/') : abs;
  }

  readonly source: SourceView = {
    sourceLine: async (absFile, line) => {
      try {
        const text = await fs.readFile(await this.workspace.resolve(absFile), 'utf8');
        const l = text.split('\n')[line - 1];
        return l === undefined ? undefined : l.replace(/\r$/, '').slice(0, MAX_VALUE_CHARS);
      } catch {
        // Outside the workspace (a library frame) or unreadable: the location alone is shown.
        return undefined;
      }
    },
  };

  async setBreakpoints(file: string, lines: number[]): Promise<BreakpointsOutcome> {
    const abs = await this.workspace.resolve(file);
    let text: string;
    try {
      const st = await fs.stat(abs);
      if (!st.isFile()) throw new ToolError(`${file} is not a file`);
      text = await fs.readFile(abs, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT')
        throw new ToolError(`no such file in the workspace: ${file}`);
      throw err;
    }
    const count = text.endsWith('\n') ? text.split('\n').length - 1 : text.split('\n').length;
    for (const line of lines) {
      if (!Number.isInteger(line) || line < 1)
        throw new ToolError(`line ${line} is not a line: lines are 1-based; nothing was changed`);
      if (line > count)
        throw new ToolError(`line ${line} is past the end of ${file} (${count} lines); nothing was changed`);
    }
    const unique = [...new Set(lines)].sort((a, b) => a - b);
    if (unique.length === 0) this.breakpoints.delete(abs);
    else this.breakpoints.set(abs, unique);
    await this.reapEnded();
    const rel = this.displayPath(abs);
    if (!this.session) return { file: rel, lines: unique };
    return { file: rel, lines: unique, results: await this.session.setBreakpoints(abs, unique) };
  }

  adapters(): Promise<Availability[]> {
    return workspaceAdapters(this.workspace.root, activeAdapters().specs);
  }

  /** debug.d files the runner could not use, and why. */
  get adapterProblems(): string[] {
    return activeAdapters().problems;
  }

  /** The named adapter, or a ToolError listing the ones this runner has. */
  private named(id: AdapterId): AdapterSpec {
    const spec = adapterSpec(id);
    if (!spec)
      throw new ToolError(
        `unknown debug adapter ${JSON.stringify(id)}; this runner has: ${activeAdapters()
          .specs.map((s) => s.id)
          .join(', ')}`,
      );
    return spec;
  }

  private refuseSecond(): void {
    const s = this.session!;
    const where =
      s.state === 'stopped' && s.lastStop?.location?.file
        ? `, stopped at ${this.displayPath(s.lastStop.location.file)}:${s.lastStop.location.line}`
        : `, ${s.state}`;
    throw new ToolError(
      `a debug session is already live in this conversation: ${s.id} (${s.adapter}, ${describeStart(s.start, this)}${where}). ` +
        `Only one session per conversation: end it with op "terminate" first, then launch again.`,
    );
  }

  async launch(
    program: string,
    args: string[],
    adapter: AdapterId | undefined,
    boundMs: number,
    signal: AbortSignal,
  ): Promise<Started> {
    await this.reapEnded();
    if (this.session) this.refuseSecond();
    const abs = await this.workspace.resolve(program);
    let isDir: boolean;
    try {
      isDir = (await fs.stat(abs)).isDirectory();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT')
        throw new ToolError(`program not found: ${program} does not exist in the workspace`);
      throw err;
    }
    const candidates = adapter ? [this.named(adapter).id] : await candidatesFor(abs);
    if (candidates.length === 0)
      throw new ToolError(
        `no debug adapter fits ${program}: tried ${describeTried()}. Name one with the adapter argument if the program is one of these in disguise`,
      );
    const dir = isDir ? abs : path.dirname(abs);
    const checked = await Promise.all(candidates.map((id) => adapterForFile(this.named(id), this.workspace.root, dir)));
    const availability = checked.find((a) => a.available);
    if (!availability) {
      throw new ToolError(
        `no debug adapter can run ${program}: ${checked.map((a) => `${a.id}: ${whyUnavailable(a)}`).join('; ')}`,
      );
    }
    const id = availability.id;
    const scratchDir = await makeScratchDir(availability.root!.dir);
    const start: Start = { kind: 'launch', program: abs, args, cwd: availability.root!.dir, scratchDir };
    try {
      return await this.open(id, availability, start, boundMs, signal);
    } catch (err) {
      await fs.rm(scratchDir, { recursive: true, force: true });
      throw err;
    }
  }

  async attach(port: number, adapter: AdapterId | undefined, boundMs: number, signal: AbortSignal): Promise<Started> {
    await this.reapEnded();
    if (this.session) this.refuseSecond();
    const rows = await this.adapters();
    let chosen: Availability | undefined;
    if (adapter) {
      chosen = rows.find((r) => r.id === this.named(adapter).id)!;
      if (!chosen.available) throw new ToolError(`the ${adapter} adapter cannot run here: ${whyUnavailable(chosen)}`);
    } else {
      const usable = rows.filter((r) => r.available);
      if (usable.length !== 1) {
        throw new ToolError(
          usable.length === 0
            ? `no debug adapter can run in this workspace (${rows.map((r) => `${r.id}: ${whyUnavailable(r)}`).join('; ')})`
            : `several adapters could attach (${usable.map((r) => r.id).join(', ')}): name one with the adapter argument`,
        );
      }
      chosen = usable[0];
    }
    return this.open(
      chosen.id,
      chosen,
      { kind: 'attach', port, cwd: chosen.root?.dir ?? this.workspace.root },
      boundMs,
      signal,
    );
  }

  private async open(
    id: AdapterId,
    availability: Availability,
    start: Start,
    boundMs: number,
    signal: AbortSignal,
  ): Promise<Started> {
    this.output.clear();
    this.endedNote = undefined;
    const sessionId = `dbg-${++this.sessionCount}`;
    const { session, outcome } = await DebugSession.open(
      {
        id: sessionId,
        spec: this.named(id),
        command: availability.binary,
        start,
        breakpoints: new Map(this.breakpoints),
        output: this.output,
        timeouts: {
          requestMs: this.settings.requestTimeoutSeconds * 1000,
          launchMs: this.settings.launchTimeoutSeconds * 1000,
        },
        source: this.source,
      },
      boundMs,
      signal,
    );
    this.session = session;
    const ttlMs = this.settings.ttlSeconds * 1000;
    this.ttlTimer = setTimeout(() => void this.expire(session), ttlMs);
    this.ttlTimer.unref();
    await this.afterOutcome(session, outcome);
    return { session, outcome, availability };
  }

  /** A program that ended takes its session with it: the adapter is stopped at once. */
  async afterOutcome(session: DebugSession, outcome: Outcome): Promise<void> {
    if (outcome.kind === 'ended') await this.retire(session);
  }

  /** The hard TTL: not queued behind a call that may be blocked on the very session it ends. */
  private async expire(session: DebugSession): Promise<void> {
    if (this.session !== session) return;
    session.endReason ??= `expired: debug sessions end after ${formatSeconds(this.settings.ttlSeconds)}`;
    await this.retire(session);
  }

  private async retire(session: DebugSession): Promise<void> {
    await session.close();
    if (this.session !== session) return;
    this.session = undefined;
    clearTimeout(this.ttlTimer);
    const code =
      session.endReason === PROGRAM_ENDED && session.exitCode !== undefined ? ` (exit code ${session.exitCode})` : '';
    this.endedNote = `the last session, ${session.id}, ended: ${session.endReason}${code}`;
  }

  /** Ends the live session on request. */
  async terminate(): Promise<DebugSession | undefined> {
    const s = this.session;
    if (!s) return undefined;
    s.endReason ??= 'terminated on request';
    await this.retire(s);
    this.endedNote = undefined;
    return s;
  }

  async stop(): Promise<void> {
    if (this.session) {
      this.session.endReason ??= 'the run stopped';
      await this.retire(this.session);
    }
  }
}

export function describeStart(start: Start, sup: { displayPath(abs: string): string }): string {
  return start.kind === 'launch' ? sup.displayPath(start.program) : `attached to port ${start.port}`;
}

export function formatSeconds(s: number): string {
  const m = Math.floor(s / 60);
  const r = Math.round(s % 60);
  if (m === 0) return `${r} second${r === 1 ? '' : 's'}`;
  return r === 0 ? `${m} minute${m === 1 ? '' : 's'}` : `${m}m${String(r).padStart(2, '0')}s`;
}
