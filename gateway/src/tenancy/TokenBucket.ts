import type { Rate } from './config';

/** A token bucket: `burst` tokens at most, refilled at `perSecond`. One per tenant and kind. */
export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(
    private readonly rate: Rate,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.tokens = rate.burst;
    this.last = now();
  }

  /** Takes one token: 0 when taken, else the milliseconds until one will be there. */
  take(): number {
    const t = this.now();
    this.tokens = Math.min(this.rate.burst, this.tokens + ((t - this.last) / 1000) * this.rate.perSecond);
    this.last = t;
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil(((1 - this.tokens) / this.rate.perSecond) * 1000));
  }
}
