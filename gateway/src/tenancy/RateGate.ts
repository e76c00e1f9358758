import type { Rate } from './config';
import { ResourceExhausted } from './statusDetails';
import { TokenBucket } from './TokenBucket';

/** Distinct retry hints kept per gate; a slow rate (one token a minute) has more, then they are made again. */
const MAX_KEPT_REFUSALS = 256;

/**
 * One tenant's token bucket for one kind of call. A refusal must cost as little as possible
 * (a flooding tenant sends thousands a second, all on the gateway's one thread), so each
 * refusal status, trailers and encoded details included, is made once per distinct retry
 * hint and then reused; refusals are counted here and reported in aggregate (see
 * RefusalTally), never one log or audit line each.
 */
export class RateGate {
  private readonly bucket: TokenBucket;
  private readonly refusals = new Map<number, ResourceExhausted>();
  /** Refusals since the last report. */
  refused = 0;

  constructor(
    readonly tenant: string,
    readonly kind: 'createRun' | 'callTool',
    readonly rate: Rate,
    now?: () => number,
  ) {
    this.bucket = new TokenBucket(rate, now);
  }

  /** Takes a token: undefined when taken, else the refusal to answer with. */
  take(): ResourceExhausted | undefined {
    const wait = this.bucket.take();
    if (wait === 0) return undefined;
    this.refused++;
    let r = this.refusals.get(wait);
    if (!r) {
      if (this.refusals.size >= MAX_KEPT_REFUSALS) this.refusals.clear();
      r = new ResourceExhausted(
        `tenant ${this.tenant} is over its ${this.kind} rate limit (${this.rate.perSecond}/s, burst ${this.rate.burst}); retry in ${wait} ms`,
        { retryAfterMs: wait },
      );
      this.refusals.set(wait, r);
    }
    return r;
  }
}
