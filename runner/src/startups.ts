/**
 * How a hold ended: the process was up (it published its first diagnostics, it answered its
 * first request, or it was asked nothing for a while after starting), it exited, or the cap.
 */
export type HoldEnd = 'diagnostics' | 'answered' | 'settled' | 'exited' | 'cap';

/** A process of the run that is starting and wants the CPU meanwhile (a language server). */
export interface StartupHold {
  /** Ends the hold; later calls do nothing. */
  end(how: Exclude<HoldEnd, 'cap'>): void;
}

/** Background work that steps aside while processes of the run start (the ast index). */
export interface PoliteWork {
  hold(): void;
  release(): void;
}

/** One hold as it happened, for status and tests (times from the clock, in ms). */
export interface HoldRecord {
  name: string;
  began: number;
  ended?: number;
  how?: HoldEnd;
  /** Begun within the cooldown after a capped stretch: the work was not held. */
  ignored?: boolean;
}

/** Time as the holds see it (a fake in unit tests). */
export interface StartupClock {
  now(): number;
  /** Calls `fn` after `ms` unless cancelled; must not keep the process alive. */
  after(ms: number, fn: () => void): () => void;
}

const realClock: StartupClock = {
  now: () => Date.now(),
  after(ms, fn) {
    const t = setTimeout(fn, ms);
    t.unref();
    return () => clearTimeout(t);
  },
};

const HISTORY = 20;

/**
 * The processes of a run that are starting now. One family says when a process starts and
 * when it is up (the lsp family: from spawning a language server to its first diagnostics);
 * background work of other families holds off meanwhile (the ast index), so a starting server
 * gets the CPU. The families know only this, not each other.
 *
 * Background work is never held for good: a stretch of holds ends after `capMs` whatever the
 * processes do, and holds begun in the `capMs` after such a forced end do not hold the work.
 */
export class StartingProcesses {
  private readonly active = new Set<HoldRecord>();
  private readonly work: PoliteWork[] = [];
  private readonly records: HoldRecord[] = [];
  private cancelCap?: () => void;
  private cooldownUntil = Number.NEGATIVE_INFINITY;
  /** Stretches during which the work was held, and how long they lasted in all. */
  holds = 0;
  heldMs = 0;
  private heldSince = 0;

  constructor(
    readonly capMs = 15_000,
    private readonly clock: StartupClock = realClock,
  ) {}

  /** Starts holding background work until the returned hold ends (or the cap). */
  begin(name: string): StartupHold {
    const record: HoldRecord = { name, began: this.clock.now() };
    this.remember(record);
    if (record.began < this.cooldownUntil) {
      record.ignored = true;
      return { end: (how) => this.close(record, how) };
    }
    this.active.add(record);
    if (this.active.size === 1) {
      this.holds++;
      this.heldSince = record.began;
      this.cancelCap = this.clock.after(this.capMs, () => this.capped());
      this.work.forEach((w) => w.hold());
    }
    return { end: (how) => this.end(record, how) };
  }

  /** Registers background work; held at once if something is starting now. */
  observe(work: PoliteWork): void {
    this.work.push(work);
    if (this.active.size > 0) work.hold();
  }

  /** Names of the processes holding the work now. */
  get holding(): string[] {
    return [...this.active].map((r) => r.name);
  }

  /** The latest holds, oldest first. */
  get history(): readonly HoldRecord[] {
    return this.records;
  }

  private end(record: HoldRecord, how: HoldEnd): void {
    if (!this.active.delete(record)) return;
    this.close(record, how);
    if (this.active.size === 0) this.releaseAll();
  }

  private close(record: HoldRecord, how: HoldEnd): void {
    if (record.ended !== undefined) return;
    record.ended = this.clock.now();
    record.how = how;
  }

  private capped(): void {
    this.cancelCap = undefined;
    for (const r of this.active) this.close(r, 'cap');
    this.active.clear();
    this.cooldownUntil = this.clock.now() + this.capMs;
    this.releaseAll();
  }

  private releaseAll(): void {
    this.cancelCap?.();
    this.cancelCap = undefined;
    this.heldMs += this.clock.now() - this.heldSince;
    this.work.forEach((w) => w.release());
  }

  private remember(record: HoldRecord): void {
    this.records.push(record);
    if (this.records.length > HISTORY) this.records.shift();
  }
}
