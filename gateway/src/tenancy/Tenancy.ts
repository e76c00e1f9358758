import type { ResourceLimits } from '../config';
import { policyFor, type TenancyConfig, type TenantPolicy } from './config';
import { CallSlots } from './CallSlots';
import { FairQueue, QueueFullError } from './FairQueue';
import { describeViolation, exceededQuota, type Reserved } from './quota';
import { RateGate } from './RateGate';
import { RefusalTally, type RefusalReport } from './RefusalTally';
import { ResourceExhausted } from './statusDetails';

type Kind = 'createRun' | 'callTool';

/**
 * Keeps tenants from hurting each other: rate limits per tenant and kind, quotas on what a
 * tenant's runs reserve, and the fair admission queue in front of the engine.
 */
export class Tenancy {
  private readonly gates = { createRun: new Map<string, RateGate>(), callTool: new Map<string, RateGate>() };
  private readonly policies = new Map<string, TenantPolicy>();
  private readonly slots = new Map<string, CallSlots>();
  private readonly lineFull = new Map<string, ResourceExhausted>();
  readonly admission: FairQueue;
  /** Rate-limit refusals, reported per tenant and kind once a window; `onRefusals` sets where. */
  private readonly tally = new RefusalTally((r) => this.reportRefusals(r));
  private reportRefusals: (r: RefusalReport) => void = () => undefined;

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

  /** Where the per-window refusal counts go (the gateway's telemetry). */
  onRefusals(report: (r: RefusalReport) => void): void {
    this.reportRefusals = report;
  }

  /**
   * Spends one token of the tenant's bucket for `kind`: undefined when spent, else the
   * refusal (RESOURCE_EXHAUSTED with a retry hint) to answer with. Allocates nothing on a
   * refusal after the first few: this runs for every call of a flood.
   */
  refusal(tenant: string, kind: Kind): ResourceExhausted | undefined {
    let gate = this.gates[kind].get(tenant);
    if (!gate) this.gates[kind].set(tenant, (gate = new RateGate(tenant, kind, this.policy(tenant)[kind], this.now)));
    const refused = gate.take();
    if (refused) this.tally.counted(gate);
    return refused;
  }

  /** Like `refusal`, but throws it. */
  limitRate(tenant: string, kind: Kind): void {
    const refused = this.refusal(tenant, kind);
    if (refused) throw refused;
  }

  /** The tenant's CallTool slots (`callsInFlight`, `queuedCalls`). */
  callSlots(tenant: string): CallSlots {
    let s = this.slots.get(tenant);
    if (!s) {
      const p = this.policy(tenant);
      this.slots.set(tenant, (s = new CallSlots(p.callsInFlight, p.queuedCalls)));
    }
    return s;
  }

  /** The refusal of a call that finds the tenant's line of waiting calls full. */
  callLineFull(tenant: string): ResourceExhausted {
    let r = this.lineFull.get(tenant);
    if (!r) {
      const p = this.policy(tenant);
      r = new ResourceExhausted(
        `tenant ${tenant} has ${p.callsInFlight} calls in flight and ${p.queuedCalls} waiting (callsInFlight, queuedCalls); retry later`,
        { retryAfterMs: 100 },
      );
      this.lineFull.set(tenant, r);
    }
    return r;
  }

  /** Reports the refusals counted so far (at shutdown, and for tests). */
  flushRefusals(): void {
    this.tally.flush();
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
