/**
 * The process family: commands and PTY sessions of a run, outside tool calls. The gateway
 * starts, feeds, signals and resizes processes with these commands; the runner reports each
 * process's output and its end as run events, which the gateway relays to whoever watches that
 * process (StartProcess / ConnectProcess, and the E2B surface's commands).
 */
import { FamilyCommand, RunEventType } from './run';

export const PROCESS_FAMILY = 'process';

/** Rows and columns of a PTY. */
export interface PtySize {
  cols: number;
  rows: number;
}

export interface ProcessStartParams {
  /** The program, found on PATH when it has no slash. */
  cmd: string;
  args: string[];
  /** Workspace-relative or absolute inside the workspace; default the workspace root. */
  cwd?: string;
  /** Added to the runner's own environment, which holds no secret. */
  env?: Record<string, string>;
  /** A PTY of this size instead of pipes: output comes as stream `pty`, input goes to it. */
  pty?: PtySize;
  /** Keeps stdin open for `input` (otherwise it is closed at once, as `</dev/null`). */
  stdin?: boolean;
  /** A caller's label, reported by `list` (E2B's tag). */
  tag?: string;
  /** Killed (its whole process group) after this long; 0 or absent: no limit of its own. */
  timeoutMs?: number;
}

export interface ProcessInfo {
  pid: number;
  cmd: string;
  args: string[];
  cwd: string;
  env: Record<string, string>;
  tag?: string;
  pty: boolean;
}

/** A refusal a caller can act on; never thrown, so it reaches the client as it is. */
export interface ProcessRefusal {
  ok: false;
  code: 'invalid' | 'not_found' | 'limit' | 'failed';
  message: string;
}

export type ProcessStartReply = { ok: true; pid: number } | ProcessRefusal;
export type ProcessReply = { ok: true } | ProcessRefusal;

/** gateway → runner: starts a process; its output and end follow as run events. */
export namespace ProcessStartCommand {
  export const type = new FamilyCommand<ProcessStartParams, ProcessStartReply>(PROCESS_FAMILY, 'start');
}

export interface ProcessInputParams {
  pid: number;
  /** Base64 of the bytes written to its stdin (or to its PTY). */
  data: string;
}

/** gateway → runner: bytes for a process's stdin or PTY. */
export namespace ProcessInputCommand {
  export const type = new FamilyCommand<ProcessInputParams, ProcessReply>(PROCESS_FAMILY, 'input');
}

/** gateway → runner: closes a process's stdin (sends EOF to a PTY). */
export namespace ProcessCloseStdinCommand {
  export const type = new FamilyCommand<{ pid: number }, ProcessReply>(PROCESS_FAMILY, 'closeStdin');
}

export type ProcessSignalName = 'SIGKILL' | 'SIGTERM' | 'SIGINT' | 'SIGHUP';

/** gateway → runner: a signal to the process's whole process group. */
export namespace ProcessSignalCommand {
  export const type = new FamilyCommand<{ pid: number; signal: ProcessSignalName }, ProcessReply>(
    PROCESS_FAMILY,
    'signal',
  );
}

/** gateway → runner: a PTY's new size. */
export namespace ProcessResizeCommand {
  export const type = new FamilyCommand<{ pid: number; size: PtySize }, ProcessReply>(PROCESS_FAMILY, 'resize');
}

/** gateway → runner: the processes still running that the family started. */
export namespace ProcessListCommand {
  export const type = new FamilyCommand<Record<string, never>, { processes: ProcessInfo[] }>(PROCESS_FAMILY, 'list');
}

export type ProcessStream = 'stdout' | 'stderr' | 'pty';

export interface ProcessOutputPayload {
  pid: number;
  stream: ProcessStream;
  /** Base64 of the bytes, in the order the process wrote them on this stream. */
  data: string;
}

/** runner → gateway: output of a process. */
export namespace ProcessOutputEvent {
  export const type = new RunEventType<ProcessOutputPayload>('process.output');
}

export interface ProcessEndPayload {
  pid: number;
  /** The exit code; -1 when it ended by a signal or never started. */
  exitCode: number;
  /** The signal that ended it, if one did. */
  signal?: string;
  /** Why the family ended it or why it failed, in words (output cap, timeout, spawn error). */
  error?: string;
}

/** runner → gateway: a process ended; no output of it follows. */
export namespace ProcessEndEvent {
  export const type = new RunEventType<ProcessEndPayload>('process.end');
}
