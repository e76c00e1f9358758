import type { ResourceCounts, ResourceKind, ResourcesPayload } from '../../protocol/src/resources';

/** Why a process replaced an earlier one of the same name: it crashed or died, or it was stopped on request. */
export type RestartCause = 'crash' | 'request';

/** What a family tells about the processes it keeps for one name (a server id, a kernel's language). */
export interface ProcessLifecycle {
  started(name: string, restart?: RestartCause): void;
  stopped(name: string): void;
}

export const noLifecycle: ProcessLifecycle = { started: () => undefined, stopped: () => undefined };

/**
 * The run's language servers and kernels, counted: alive now, started, restarted. Every
 * change is sent up whole (coalesced within one tick), so the gateway needs no history.
 */
export class ResourceLedger {
  private readonly counts = new Map<string, ResourceCounts>();
  private pending = false;

  constructor(private readonly send: (payload: ResourcesPayload) => void) {}

  lifecycle(kind: ResourceKind): ProcessLifecycle {
    return {
      started: (name, restart) => {
        const c = this.entry(kind, name);
        c.alive++;
        c.starts++;
        if (restart === 'crash') c.restartsAfterCrash++;
        if (restart === 'request') c.restartsRequested++;
        this.changed();
      },
      stopped: (name) => {
        const c = this.entry(kind, name);
        c.alive = Math.max(0, c.alive - 1);
        this.changed();
      },
    };
  }

  snapshot(): ResourceCounts[] {
    return [...this.counts.values()].map((c) => ({ ...c }));
  }

  /** Sends the picture as it is to a gateway that just connected. */
  announce(): void {
    if (this.counts.size > 0) this.send({ resources: this.snapshot(), replay: true });
  }

  private entry(kind: ResourceKind, name: string): ResourceCounts {
    const k = `${kind}\u0000${name}`;
    let c = this.counts.get(k);
    if (!c) {
      c = { kind, name, alive: 0, starts: 0, restartsAfterCrash: 0, restartsRequested: 0 };
      this.counts.set(k, c);
    }
    return c;
  }

  private changed(): void {
    if (this.pending) return;
    this.pending = true;
    setImmediate(() => {
      this.pending = false;
      this.send({ resources: this.snapshot() });
    });
  }
}
