import {
  WatchersCommand,
  WorkerEvent,
  type WatchSnapshot,
  type WorkerEventPayload,
} from '../../../protocol/src/workers';
import type { RunnerClient } from '../runs/RunnerClient';

type Sink = (e: WorkerEventPayload) => void;

/**
 * The WatchWorkers streams of one runner. The roster lives in the runner, so a watcher that
 * connects (or reconnects after a gateway restart) first gets a snapshot of the running client
 * workers and then the live events after it; nothing is kept here that a restart would lose.
 */
class RunnerWatchers {
  private readonly sinks = new Set<Sink>();

  constructor(private readonly runner: RunnerClient) {
    runner.onRunEvent(WorkerEvent.type, (e) => {
      for (const sink of this.sinks) sink(e);
    });
  }

  /** Adds a watcher; events reach `deliver` in order, the snapshot first. Returns the unsubscribe. */
  async add(deliver: Sink): Promise<() => void> {
    const early: WorkerEventPayload[] = [];
    let live = false;
    const sink: Sink = (e) => (live ? deliver(e) : early.push(e));
    this.sinks.add(sink);
    let snapshot: WatchSnapshot;
    try {
      snapshot = await this.runner.command(WatchersCommand.type, { count: this.sinks.size });
    } catch (err) {
      this.sinks.delete(sink);
      throw err;
    }
    snapshot.events.forEach(deliver);
    // Events raised while the snapshot was taken: only those it does not already hold.
    early.filter((e) => e.seq > snapshot.seq).forEach(deliver);
    live = true;
    let removed = false;
    return () => {
      if (removed) return;
      removed = true;
      this.sinks.delete(sink);
      // Best effort: a runner that is gone has no workers left to tell.
      this.runner.command(WatchersCommand.type, { count: this.sinks.size }).catch(() => undefined);
    };
  }
}

/** Finds the watcher set of a runner, creating it on first use. */
export class WorkerWatch {
  private readonly byRunner = new WeakMap<RunnerClient, RunnerWatchers>();

  of(runner: RunnerClient): RunnerWatchers {
    let w = this.byRunner.get(runner);
    if (!w) {
      w = new RunnerWatchers(runner);
      this.byRunner.set(runner, w);
    }
    return w;
  }
}
