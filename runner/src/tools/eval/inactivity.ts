/**
 * The cell timeout: a budget of silence, not of total time. Output resets it; it is paused
 * while a bridged tool call is outstanding, so a cell waiting on its own tools is never cut off.
 */
export class InactivityTimer {
  private timer: NodeJS.Timeout | undefined;
  private outstanding = 0;
  private stopped = false;

  constructor(
    private readonly budgetMs: number,
    private readonly onExpired: () => void,
  ) {
    this.arm();
  }

  private arm(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.stopped || this.outstanding > 0) return;
    this.timer = setTimeout(() => {
      this.stopped = true;
      this.onExpired();
    }, this.budgetMs);
  }

  /** Something happened: the budget starts over. */
  touch(): void {
    this.arm();
  }

  /** A bridged call went out: the clock stops until every such call is back. */
  pause(): void {
    this.outstanding++;
    this.arm();
  }

  resume(): void {
    this.outstanding = Math.max(0, this.outstanding - 1);
    this.arm();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}
