import type { SharedRunRecords } from '../sandbox/provider';
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
 *
 * Kept in the gateway's state directory, or, where the provider keeps them for every replica
 * (`SandboxProvider.pausedRecords`), beside the run's kept workspace: then `shared`, and any
 * replica lists and resumes any paused run.
 */
export class PausedStore {
  private readonly dir?: RecordDir<PausedRecord>;
  private readonly records?: SharedRunRecords;

  constructor(where: string | SharedRunRecords) {
    if (typeof where === 'string') this.dir = new RecordDir(where, isPaused);
    else this.records = where;
  }

  /** Other replicas read and write the same records. */
  get shared(): boolean {
    return this.records !== undefined;
  }

  async write(runId: string, record: PausedRecord, opts: { durable?: boolean } = {}): Promise<void> {
    if (this.records) await this.records.write(runId, record.workspace, record);
    else await this.dir!.write(runId, record, opts);
  }

  async read(runId: string): Promise<PausedRecord | undefined> {
    if (!this.records) return this.dir!.read(runId);
    const r = await this.records.read(runId);
    return isPaused(r) && r.runId === runId ? r : undefined;
  }

  async remove(runId: string): Promise<void> {
    await (this.records ?? this.dir!).remove(runId);
  }

  async list(): Promise<string[]> {
    return (this.records ?? this.dir!).list();
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
