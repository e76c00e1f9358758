import { RecordDir } from './RecordDir';
import type { PauseInfo, RunRecord, RunSpec, RunStart } from './RunRecord';

/** A paused run, whole: what a restarted gateway needs to list it and resume it. */
export interface PausedRecord {
  runId: string;
  tenant: string;
  spec: RunSpec;
  createdAt: string;
  start: RunStart;
  /** The provider's handle on the kept workspace. */
  workspace: string;
  pause: Omit<PauseInfo, 'pausedAt' | 'resumedAt'> & { pausedAt: string };
}

const isPaused = (r: unknown): r is PausedRecord => {
  const p = r as PausedRecord | null;
  return (
    !!p &&
    typeof p.runId === 'string' &&
    typeof p.tenant === 'string' &&
    !!p.spec &&
    typeof p.createdAt === 'string' &&
    typeof p.workspace === 'string' &&
    !!p.pause &&
    typeof p.pause.pausedAt === 'string'
  );
};

/**
 * The paused runs, by run id. A record is the decision that the run is paused: it is written
 * (durably: its sandbox is about to go) before the sandbox is removed, and removed only once a
 * resumed run is READY. A restart that finds a record with the run's sandbox still there
 * completes the pause rather than trust a runner it never saw finish.
 */
export class PausedStore extends RecordDir<PausedRecord> {
  constructor(dir: string) {
    super(dir, isPaused);
  }

  static recordOf(run: RunRecord, workspace: string, pause: PauseInfo): PausedRecord {
    return {
      runId: run.runId,
      tenant: run.tenant,
      spec: run.spec,
      createdAt: run.createdAt.toISOString(),
      start: run.start,
      workspace,
      pause: {
        depth: pause.depth,
        reason: pause.reason,
        stateBytes: pause.stateBytes,
        notKept: pause.notKept,
        pausedAt: pause.pausedAt.toISOString(),
        ...(pause.checkpoint ? { checkpoint: pause.checkpoint } : {}),
      },
    };
  }

  static pauseOf(record: PausedRecord): PauseInfo {
    return { ...record.pause, pausedAt: new Date(record.pause.pausedAt) };
  }
}
