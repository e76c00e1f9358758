/**
 * Pausing a run at portable depth: the runner writes what of the run is data (staged edits,
 * diagnostics ledgers, the worker roster, each eval kernel's variables) into the run's own
 * workspace volume, under a directory the tools neither show nor write (PORTABLE_STATE_DIR);
 * the sandbox is then removed. On resume a new runner, initialized on the same workspace,
 * restores it. Both are commands of the `run` family: `run/suspend` and `run/restore`.
 */
import { FamilyCommand } from './run';

export const RUN_FAMILY = 'run';

/** The workspace-relative directory that holds a run's portable state; reserved, never a tool's. */
export const PORTABLE_STATE_DIR = '.tether-run';

/** Something of the run that a suspend or a restore could not keep, and why, in words a model can act on. */
export interface NotKept {
  /** What it was: `python variable f`, `debug session`, `worker w2 (running)`. */
  what: string;
  why: string;
}

/** One eval kernel's share of the state. */
export interface KernelStateSummary {
  language: 'python' | 'javascript';
  /** Variables written (suspend) or back in the new kernel (restore). */
  variables: number;
  /** Imported modules kept by name and imported again on restore. */
  modules: number;
  bytes: number;
  /** Python: `dill`, `cloudpickle` or `pickle`; JavaScript: `v8`. */
  serializer: string;
}

/** One family's share of the state as written. */
export interface FamilyStateSummary {
  family: string;
  bytes: number;
  /** What it holds, counted (e.g. `{ pendingEdits: 2 }`). */
  counts: Record<string, number>;
}

export interface SuspendParams {
  /** Why the run is paused, kept in the manifest (e.g. `idle`, `requested`). */
  reason?: string;
}

export interface SuspendResult {
  /** False only when nothing could be written; `notKept` then says why. */
  written: boolean;
  /** Bytes of state on the volume, manifest included. */
  bytes: number;
  /** The limit the state was held to (setting `portable.maxStateMB`). */
  limitBytes: number;
  families: FamilyStateSummary[];
  kernels: KernelStateSummary[];
  notKept: NotKept[];
}

/** gateway → runner: writes the run's portable state into its workspace; the sandbox may be removed after. */
export namespace SuspendCommand {
  export const type = new FamilyCommand<SuspendParams, SuspendResult>(RUN_FAMILY, 'suspend');
}

export type RestoreOutcome =
  /** The state was whole and came back (some items may still be in `notKept`). */
  | 'restored'
  /** No state in the workspace: nothing was restored. */
  | 'none'
  /** A state was there but incomplete or damaged: nothing of it was restored. */
  | 'torn';

export interface RestoreParams {
  /** Keep the state on the volume after restoring it (default false: it is removed once restored). */
  keep?: boolean;
  /** This run is a fork of that one: the state its parent wrote is the one to restore. */
  forkOf?: string;
}

export interface RestoreResult {
  outcome: RestoreOutcome;
  /** For `none` and `torn`: what was found (no manifest, a truncated manifest, a file that does not match). */
  problem?: string;
  /** When the state was written (ISO 8601), when there was one. */
  suspendedAt?: string;
  families: FamilyStateSummary[];
  kernels: KernelStateSummary[];
  /** What the pause lost: what could not be written at suspend, and what did not come back now. */
  notKept: NotKept[];
  /** The words the first tool result after the resume should carry. */
  notice: string;
}

/** gateway → runner: after a new runner initialized on the same workspace, restores what a suspend wrote. */
export namespace RestoreCommand {
  export const type = new FamilyCommand<RestoreParams, RestoreResult>(RUN_FAMILY, 'restore');
}
