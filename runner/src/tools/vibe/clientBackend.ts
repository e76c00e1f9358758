import type { Worker, WorkerBackend } from './roster';
import type { WatchSnapshot, WorkerEventKind, WorkerEventPayload } from '../../../../protocol/src/workers';

/**
 * Workers the platform runs itself, with its own models: every start, appended brief and kill
 * becomes an event the gateway relays on WatchWorkers; results come back as ReportWorker.
 */
export class ClientWorkerBackend implements WorkerBackend {
  readonly kind = 'client' as const;
  private seq = 0;
  private watchers = 0;

  constructor(private readonly emit: (payload: WorkerEventPayload) => void) {}

  setWatchers(count: number): void {
    this.watchers = Math.max(0, count);
  }

  unavailable(): string | undefined {
    return this.watchers > 0
      ? undefined
      : 'no platform is watching this run for client workers (nothing is connected to WatchWorkers), so nobody would run it';
  }

  begin(worker: Worker, message?: string): void {
    this.send(message === undefined ? 'START' : 'SEND', worker, message);
  }

  async stop(worker: Worker, why: 'kill' | 'superseded'): Promise<void> {
    // A superseded round is announced by the SEND that follows it.
    if (why === 'kill') this.send('KILL', worker);
  }

  /** What a watcher that connects now must be told: every client worker still running. */
  snapshot(workers: Worker[]): WatchSnapshot {
    return {
      seq: this.seq,
      events: workers
        .filter((w) => w.backend === 'client' && w.status === 'running')
        .map((w) => this.payload('START', w, this.seq)),
    };
  }

  private send(kind: WorkerEventKind, worker: Worker, message?: string): void {
    this.emit(this.payload(kind, worker, ++this.seq, message));
  }

  private payload(kind: WorkerEventKind, w: Worker, seq: number, message?: string): WorkerEventPayload {
    return {
      seq,
      kind,
      workerId: w.id,
      label: w.label,
      tier: w.tier,
      brief: w.brief,
      ...(message !== undefined ? { message } : {}),
    };
  }
}
