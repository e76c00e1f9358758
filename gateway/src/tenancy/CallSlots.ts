/**
 * One tenant's calls in flight: at most `limit` at once; more wait in the tenant's own line
 * (first come first served), at most `maxWaiting` of them. Each tenant has its own slots and
 * line, so one tenant's many calls never make another's wait.
 */
export class CallSlots {
  private inFlight = 0;
  private readonly line: ((release: () => void) => void)[] = [];

  constructor(
    readonly limit: number,
    readonly maxWaiting: number,
  ) {}

  get active(): number {
    return this.inFlight;
  }

  get waiting(): number {
    return this.line.length;
  }

  /**
   * Calls `go` with the slot's release, now or once a slot frees; returns how to leave the
   * line (a no-op once `go` ran), or undefined when the line is full and nothing happened.
   */
  enter(go: (release: () => void) => void): (() => void) | undefined {
    if (this.inFlight < this.limit) {
      this.inFlight++;
      go(this.releaser());
      return () => undefined;
    }
    if (this.line.length >= this.maxWaiting) return undefined;
    this.line.push(go);
    return () => {
      const i = this.line.indexOf(go);
      if (i >= 0) this.line.splice(i, 1);
    };
  }

  /** A release that frees the slot once, however often it is called. */
  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.line.shift();
      if (next) next(this.releaser());
      else this.inFlight--;
    };
  }
}
