import type { RateGate } from './RateGate';

/** Refusals of one tenant and kind over one window. */
export interface RefusalReport {
  tenant: string;
  kind: 'createRun' | 'callTool';
  refused: number;
  /** When the window began (its first refusal) and how long it lasted. */
  since: Date;
  windowMs: number;
}

/**
 * Reports rate-limit refusals per tenant and kind once per window (a second by default)
 * instead of once per refusal: a flood of 10,000 refused calls a second is one report a
 * second per flooding tenant. A gate with refusals joins the pending list on its first one.
 */
export class RefusalTally {
  private pending: RateGate[] = [];
  private since = 0;
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly report: (r: RefusalReport) => void,
    readonly windowMs = 1000,
  ) {}

  /** Called after `gate.refused` went up by one. */
  counted(gate: RateGate): void {
    if (gate.refused !== 1) return;
    this.pending.push(gate);
    if (!this.timer) {
      this.since = Date.now();
      this.timer = setTimeout(() => this.flush(), this.windowMs);
      this.timer.unref();
    }
  }

  /** Reports what is pending now (the timer does this every window; close does it last). */
  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const gates = this.pending;
    this.pending = [];
    const since = new Date(this.since);
    const windowMs = Date.now() - this.since;
    for (const g of gates) {
      const refused = g.refused;
      g.refused = 0;
      this.report({ tenant: g.tenant, kind: g.kind, refused, since, windowMs });
    }
  }
}
