import { ToolError } from '../../tool';
import type { WorkerStatus, WorkerTier } from '../../../../protocol/src/workers';

export type BackendKind = 'command' | 'client';

/** One background worker of the run, as the roster tracks it. */
export interface Worker {
  readonly id: string;
  readonly label: string;
  readonly tier: WorkerTier;
  readonly backend: BackendKind;
  brief: string;
  status: WorkerStatus;
  /** Increases with every vibe_send: a late settle of an earlier round is ignored. */
  round: number;
  spawnedAt: number;
  roundStartedAt: number;
  settledAt?: number;
  lastResult: string;
  /** The latest progress line while running. */
  progress: string;
}

/** Where a worker's rounds actually run. */
export interface WorkerBackend {
  readonly kind: BackendKind;
  /** Why no round can start now, or undefined when one can. */
  unavailable(): string | undefined;
  /** Starts a round on `worker.brief`; `message` is set when the round follows vibe_send. */
  begin(worker: Worker, message?: string): void;
  /** Stops the worker's current round; resolves once it is gone. */
  stop(worker: Worker, why: 'kill' | 'superseded'): Promise<void>;
}

/** The roster as a pause writes it. */
export interface PortableRoster {
  nextId: number;
  workers: Worker[];
}

export interface RosterLimits {
  maxLiveWorkers: number;
  maxWorkers: number;
  maxBriefChars: number;
}

export interface WorkerView {
  id: string;
  label: string;
  tier: WorkerTier;
  backend: BackendKind;
  status: WorkerStatus;
  elapsed_seconds: number;
  rounds: number;
  brief: string;
  progress?: string;
  last_result?: string;
}

/**
 * The run's workers: ids, limits, status and waiting. Backends start and stop rounds and
 * report back through `settle`; everything the model sees is kept here.
 */
export class WorkerRoster {
  private readonly workers = new Map<string, Worker>();
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly locks = new Map<string, Promise<unknown>>();
  private nextId = 1;
  private stopped = false;

  constructor(
    private readonly limits: RosterLimits,
    private readonly backendFor: (tier: WorkerTier) => WorkerBackend,
    private readonly now: () => number = Date.now,
  ) {}

  get liveCount(): number {
    return [...this.workers.values()].filter((w) => w.status === 'running').length;
  }

  list(): Worker[] {
    return [...this.workers.values()];
  }

  get(id: string): Worker {
    const w = this.workers.get(id);
    if (!w) {
      const known = [...this.workers.keys()];
      throw new ToolError(
        `no worker ${JSON.stringify(id)} in this run${known.length ? ` (workers: ${known.join(', ')})` : ' (none spawned yet)'}`,
      );
    }
    return w;
  }

  private checkRoom(): void {
    if (this.stopped) throw new ToolError('the run is stopping; no worker can start');
    const live = this.liveCount;
    if (live >= this.limits.maxLiveWorkers) {
      throw new ToolError(
        `${live} workers are running, the most this run allows at once is ${this.limits.maxLiveWorkers}. Wait for one (vibe_wait) or stop one (vibe_kill) first.`,
      );
    }
  }

  private backendOf(tier: WorkerTier): WorkerBackend {
    const backend = this.backendFor(tier);
    const why = backend.unavailable();
    if (why) throw new ToolError(`cannot start a ${tier} worker: ${why}`);
    return backend;
  }

  spawn(init: { brief: string; label: string; tier: WorkerTier }): Worker {
    this.checkRoom();
    if (this.workers.size >= this.limits.maxWorkers) {
      throw new ToolError(
        `this run has spawned ${this.workers.size} workers, the most it may; reuse one with vibe_send instead`,
      );
    }
    if (init.brief.length > this.limits.maxBriefChars)
      throw new ToolError(`the brief is longer than ${this.limits.maxBriefChars} characters`);
    const backend = this.backendOf(init.tier);
    const t = this.now();
    const worker: Worker = {
      id: `w${this.nextId++}`,
      label: init.label,
      tier: init.tier,
      backend: backend.kind,
      brief: init.brief,
      status: 'running',
      round: 1,
      spawnedAt: t,
      roundStartedAt: t,
      lastResult: '',
      progress: '',
    };
    this.workers.set(worker.id, worker);
    backend.begin(worker);
    return worker;
  }

  /** Appends to the brief and runs the worker again (superseding a round still running). */
  async send(id: string, message: string): Promise<Worker> {
    const w = this.get(id);
    return this.serial(w, async () => {
      if (w.status !== 'running') this.checkRoom();
      const brief = `${w.brief}\n\n${message}`;
      if (brief.length > this.limits.maxBriefChars)
        throw new ToolError(
          `the brief would grow past ${this.limits.maxBriefChars} characters; spawn a fresh worker with a shorter brief`,
        );
      const backend = this.backendOf(w.tier);
      const wasRunning = w.status === 'running';
      w.round++;
      w.brief = brief;
      w.status = 'running';
      w.settledAt = undefined;
      w.progress = '';
      w.roundStartedAt = this.now();
      if (wasRunning) await backend.stop(w, 'superseded');
      backend.begin(w, message);
      return w;
    });
  }

  async kill(id: string): Promise<{ worker: Worker; wasRunning: boolean }> {
    const w = this.get(id);
    return this.serial(w, async () => {
      if (w.status !== 'running') return { worker: w, wasRunning: false };
      this.finish(
        w,
        'killed',
        w.progress ? `killed while running; last progress: ${w.progress}` : 'killed while running',
      );
      await this.backendFor(w.tier).stop(w, 'kill');
      return { worker: w, wasRunning: true };
    });
  }

  /** A backend's word that a round ended; ignored unless it is the current, running round. */
  settle(id: string, round: number, status: Exclude<WorkerStatus, 'running'>, result: string): boolean {
    const w = this.workers.get(id);
    if (!w || w.round !== round || w.status !== 'running') return false;
    this.finish(w, status, result);
    return true;
  }

  progress(id: string, round: number, text: string): void {
    const w = this.workers.get(id);
    if (w && w.round === round && w.status === 'running') w.progress = text;
  }

  private finish(w: Worker, status: Exclude<WorkerStatus, 'running'>, result: string): void {
    w.status = status;
    w.settledAt = this.now();
    w.lastResult = result;
    const ws = this.waiters.get(w.id);
    this.waiters.delete(w.id);
    ws?.forEach((wake) => wake());
  }

  /** Resolves when the worker is settled, the time is up, or the signal aborts. */
  async wait(id: string, timeoutMs: number, signal: AbortSignal): Promise<{ settled: boolean; worker: Worker }> {
    const w = this.get(id);
    if (w.status !== 'running') return { settled: true, worker: w };
    return new Promise((resolve) => {
      const set = this.waiters.get(id) ?? new Set();
      this.waiters.set(id, set);
      const done = (settled: boolean) => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        set.delete(wake);
        resolve({ settled, worker: w });
      };
      const wake = () => done(true);
      const onAbort = () => done(false);
      const timer = setTimeout(() => done(false), timeoutMs);
      set.add(wake);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** The roster as a pause writes it: every worker, those running included, and the next id. */
  toPortable(): PortableRoster {
    return { nextId: this.nextId, workers: this.list().map((w) => ({ ...w })) };
  }

  /**
   * Takes back what toPortable gave. A worker that was running is not running now (a pause
   * keeps no processes): it comes back killed, saying so, and vibe_send starts it again.
   * Returns the ids of those.
   */
  fromPortable(saved: PortableRoster): string[] {
    const stopped: string[] = [];
    this.nextId = Math.max(this.nextId, saved.nextId);
    for (const w of saved.workers) {
      const worker: Worker = { ...w };
      if (worker.status === 'running') {
        worker.status = 'killed';
        worker.settledAt = this.now();
        worker.lastResult = `stopped by a pause of the run while running${w.progress ? ` (last progress: ${w.progress})` : ''}; vibe_send it a message to run it again`;
        worker.progress = '';
        stopped.push(worker.id);
      }
      this.workers.set(worker.id, worker);
    }
    return stopped;
  }

  /** Workers die with their run. */
  async stopAll(): Promise<void> {
    this.stopped = true;
    await Promise.allSettled(
      this.list()
        .filter((w) => w.status === 'running')
        .map((w) => this.kill(w.id)),
    );
  }

  view(w: Worker): WorkerView {
    return {
      id: w.id,
      label: w.label,
      tier: w.tier,
      backend: w.backend,
      status: w.status,
      elapsed_seconds: Math.round(((w.settledAt ?? this.now()) - w.roundStartedAt) / 100) / 10,
      rounds: w.round,
      brief: w.brief,
      ...(w.progress && w.status === 'running' ? { progress: w.progress } : {}),
      ...(w.lastResult ? { last_result: w.lastResult } : {}),
    };
  }

  /** Runs changes to one worker one after another (two sends must not start two rounds at once). */
  private serial<T>(w: Worker, fn: () => Promise<T>): Promise<T> {
    const prev = this.locks.get(w.id) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const settled = next.catch(() => undefined);
    this.locks.set(w.id, settled);
    void settled.then(() => this.locks.get(w.id) === settled && this.locks.delete(w.id));
    return next;
  }
}
