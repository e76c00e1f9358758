/**
 * The life of a run's runner as the gateway drives it: initialize, family commands, run-level
 * events and shutdown.
 */
import { NotificationType, RequestType, RequestType0 } from 'vscode-jsonrpc';
import type { ToolDescriptor } from './tools';

export interface RunFeatures {
  lsp: boolean;
  ast: boolean;
  debug: boolean;
  eval: boolean;
  questions: { enabled: boolean; targetSpace: string };
  vibe: boolean;
  /**
   * The process and fs families: commands, PTY sessions and file operations the gateway drives
   * outside tool calls. Absent (a gateway that predates it) is false: the runner runs neither.
   */
  commands?: boolean;
}

export interface InitializeParams {
  runId: string;
  conversationId: string;
  /** Absolute path of the workspace as the runner sees it. */
  workspace: string;
  features: RunFeatures;
  /** Per tool family settings from the server config, keyed by family name. */
  settings: Record<string, unknown>;
  /** The run this one was forked from (`BindParams.forkOf`). */
  forkOf?: string;
}

export interface InitializeResult {
  version: string;
  tools: ToolDescriptor[];
}

/** gateway → runner: sets the run up and lists its tools; again after a gateway restart. */
export namespace InitializeRequest {
  export const type = new RequestType<InitializeParams, InitializeResult, void>('runner/initialize');
}

/** What a runner can know before its run: the same for every run of its sandbox. */
export interface PrepareParams {
  /** Absolute path of the workspace as the runner sees it. */
  workspace: string;
  /** Per tool family settings from the server config, keyed by family name. */
  settings: Record<string, unknown>;
}

export interface PrepareResult {
  version: string;
}

/**
 * gateway → runner: readies a pooled runner with everything that does not depend on its run,
 * so that a claim is only `bind`. Until bound, a runner has no run and no tools; it may be
 * prepared again (a restarted gateway re-adopting it), never once bound.
 */
export namespace PrepareRequest {
  export const type = new RequestType<PrepareParams, PrepareResult, void>('runner/prepare');
}

/** The run a prepared runner serves from now on. */
export interface BindParams {
  runId: string;
  conversationId: string;
  features: RunFeatures;
  /**
   * The run this one was forked from. A runner bound to that run (its sandbox was started from a
   * memory checkpoint of the parent's) serves this run from now on, with everything it holds.
   */
  forkOf?: string;
}

/**
 * gateway → runner: binds a prepared runner to its run, once (`initialize` is prepare and
 * bind in one). Again with the same run id it answers the same tools; another run is refused,
 * except a fork of the bound run (`forkOf`), which it serves from then on.
 */
export namespace BindRequest {
  export const type = new RequestType<BindParams, InitializeResult, void>('runner/bind');
}

/** gateway → runner: orderly stop of every resource; the runner exits after answering. */
export namespace ShutdownRequest {
  export const type = new RequestType0<Record<string, never>, void>('runner/shutdown');
}

export interface CommandParams {
  family: string;
  command: string;
  payload: unknown;
}

/** gateway → runner: a family-specific command outside a tool call (see FamilyCommand). */
export namespace CommandRequest {
  export const type = new RequestType<CommandParams, unknown, void>('runner/command');
}

/** A runner-side event the gateway relays outside of any one call (e.g. worker roster). */
export interface RunEventParams {
  kind: string;
  payload: unknown;
}

/** runner → gateway: a run-level event (see RunEventType). */
export namespace RunEventNotification {
  export const type = new NotificationType<RunEventParams>('run/event');
}

/**
 * One command of one tool family, carried by CommandRequest: its names and its payload and
 * reply types, declared once for both sides as a RequestType is for a method.
 */
export class FamilyCommand<P, R> {
  /** Never set: it carries the payload and reply types. */
  declare readonly _: [P, R] | undefined;

  constructor(
    readonly family: string,
    readonly command: string,
  ) {}
}

/** One kind of run event, carried by RunEventNotification, with its payload type. */
export class RunEventType<P> {
  /** Never set: it carries the payload type. */
  declare readonly _: P | undefined;

  constructor(readonly kind: string) {}
}
