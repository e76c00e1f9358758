import type { ResourceLimits } from '../config';
import { policyFor, type TenancyConfig, type TenantPolicy } from './config';
import { FairQueue, QueueFullError } from './FairQueue';
import { describeViolation, exceededQuota, type Reserved } from './quota';
import { ResourceExhausted } from './statusDetails';
import { TokenBucket } from './TokenBucket';

type Kind = 'createRun' | 'callTool';

/**
 * Keeps tenants from hurting each other: rate limits per tenant and kind, quotas on what a
 * tenant's runs reserve, and the fair admission queue in front of the engine.
 */
export class Tenancy {
  private readonly buckets = new Map<string, TokenBucket>();
  private readonly policies = new Map<string, TenantPolicy>();
  readonly admission: FairQueue;

  constructor(
    private readonly config: TenancyConfig,
    private readonly maxRunsPerTenant: number,
    private readonly now?: () => number,
  ) {
    this.admission = new FairQueue(config.admission.concurrency);
  }

  policy(tenant: string): TenantPolicy {
    let p = this.policies.get(tenant);
    if (!p) this.policies.set(tenant, (p = policyFor(this.config, tenant, this.maxRunsPerTenant)));
    return p;
  }

  /** Spends one token of the tenant's bucket for `kind`, or refuses with a retry hint. */
  limitRate(tenant: string, kind: Kind): void {
    const key = `${kind}\0${tenant}`;
    let bucket = this.buckets.get(key);
    if (!bucket) this.buckets.set(key, (bucket = new TokenBucket(this.policy(tenant)[kind], this.now)));
    const wait = bucket.take();
    if (wait > 0) {
      const rate = this.policy(tenant)[kind];
      throw new ResourceExhausted(
        `tenant ${tenant} is over its ${kind} rate limit (${rate.perSecond}/s, burst ${rate.burst}); retry in ${wait} ms`,
        { retryAfterMs: wait },
      );
    }
  }

  /** Refuses a run that would put the tenant over a quota, naming it, its limit and the use. */
  checkQuota(tenant: string, inUse: Reserved, limits: ResourceLimits): void {
    const v = exceededQuota(this.policy(tenant), inUse, {
      memoryMb: limits.memoryMb,
      cpuMillis: limits.cpuMillis,
      diskMb: limits.diskMb,
    });
    if (!v) return;
    const message = describeViolation(tenant, v);
    throw new ResourceExhausted(message, { quota: { subject: `tenant:${tenant}/${v.quota}`, description: message } });
  }

  /** Runs `start` when the fair queue admits it; refuses at once when the tenant's line is full. */
  admit<T>(tenant: string, start: () => Promise<T>): Promise<T> {
    try {
      return this.admission.submit(tenant, this.policy(tenant).queuedCreates, start);
    } catch (err) {
      if (err instanceof QueueFullError)
        throw new ResourceExhausted(`${err.message}; retry later`, { retryAfterMs: 1000 });
      throw err;
    }
  }
}
