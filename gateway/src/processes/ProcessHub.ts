import {
  ProcessEndEvent,
  ProcessOutputEvent,
  type ProcessEndPayload,
  type ProcessOutputPayload,
  type ProcessStream,
} from '../../../protocol/src/process';
import type { RunnerClient } from '../runs/RunnerClient';

export interface ProcessWatcher {
  output(stream: ProcessStream, data: Buffer): void;
  /** Once, last. */
  end(end: ProcessEndPayload): void;
}

/** Events of pids nobody has claimed yet, kept while a start awaits its reply: bounded. */
const MAX_EARLY_BYTES = 4 * 1024 * 1024;

/**
 * The process events of one runner, routed to the watchers of each pid. The runner sends the
 * events of every process it runs; one that no start is waiting for and nobody watches is
 * dropped. While a start is under way, events of pids not yet known are kept (their pid may
 * be the one its reply names), up to a bound.
 */
export class ProcessHub {
  private readonly watchers = new Map<number, Set<ProcessWatcher>>();
  private starting = 0;
  private early: (ProcessOutputPayload | (ProcessEndPayload & { ended: true }))[] = [];
  private earlyBytes = 0;
  private gone?: Error;

  constructor(runner: RunnerClient) {
    runner.onRunEvent(ProcessOutputEvent.type, (e) => this.route(e));
    runner.onRunEvent(ProcessEndEvent.type, (e) => this.route({ ...e, ended: true }));
    runner.onGone((err) => {
      this.gone = err;
      const end = { pid: 0, exitCode: -1, error: `the run's runner is gone: ${err.message}` };
      for (const [pid, set] of this.watchers) for (const w of set) w.end({ ...end, pid });
      this.watchers.clear();
    });
  }

  private route(e: ProcessOutputPayload | (ProcessEndPayload & { ended: true })): void {
    const set = this.watchers.get(e.pid);
    if (!set) {
      if (this.starting > 0 && this.earlyBytes < MAX_EARLY_BYTES) {
        this.early.push(e);
        this.earlyBytes += 'data' in e ? e.data.length : 0;
      }
      return;
    }
    this.deliver(set, e);
    if ('ended' in e) this.watchers.delete(e.pid);
  }

  private deliver(set: Set<ProcessWatcher>, e: ProcessOutputPayload | (ProcessEndPayload & { ended: true })): void {
    if ('ended' in e) {
      const { ended: _, ...end } = e;
      for (const w of set) w.end(end);
    } else {
      const data = Buffer.from(e.data, 'base64');
      for (const w of set) w.output(e.stream, data);
    }
  }

  /** Adds a watcher of `pid`; returns its removal. */
  watch(pid: number, w: ProcessWatcher): () => void {
    if (this.gone) {
      w.end({ pid, exitCode: -1, error: `the run's runner is gone: ${this.gone.message}` });
      return () => undefined;
    }
    let set = this.watchers.get(pid);
    if (!set) this.watchers.set(pid, (set = new Set()));
    set.add(w);
    return () => {
      const s = this.watchers.get(pid);
      s?.delete(w);
      if (s?.size === 0) this.watchers.delete(pid);
    };
  }

  /** A start is about to be sent: events of unknown pids are kept until it is claimed or cancelled. */
  expectStart(): { claim(pid: number, w: ProcessWatcher): () => void; cancel(): void } {
    this.starting++;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      if (--this.starting === 0) {
        this.early = [];
        this.earlyBytes = 0;
      }
    };
    return {
      claim: (pid, w) => {
        const mine = this.early.filter((e) => e.pid === pid);
        this.early = this.early.filter((e) => e.pid !== pid);
        finish();
        const unwatch = this.watch(pid, w);
        const set = this.watchers.get(pid);
        for (const e of mine) {
          if (!set) break;
          this.deliver(set, e);
          if ('ended' in e) {
            this.watchers.delete(pid);
            break;
          }
        }
        return unwatch;
      },
      cancel: finish,
    };
  }
}
