import type { TenantPolicy } from './config';

/** What a tenant's runs hold against its quotas. */
export interface Reserved {
  liveRuns: number;
  memoryMb: number;
  cpuMillis: number;
  diskMb: number;
}

export interface QuotaViolation {
  /** The quota's key in the config (`tenancy.…`). */
  quota: keyof Reserved;
  limit: number;
  inUse: number;
  asked: number;
}

/**
 * The first quota a new run would exceed, or undefined when it fits. Exactly at the limit
 * fits: a quota of 4096 MiB admits runs reserving 4096 MiB in total.
 */
export function exceededQuota(
  policy: TenantPolicy,
  inUse: Reserved,
  asked: Omit<Reserved, 'liveRuns'>,
): QuotaViolation | undefined {
  const want: Reserved = { liveRuns: 1, ...asked };
  for (const quota of ['liveRuns', 'memoryMb', 'cpuMillis', 'diskMb'] as const) {
    if (inUse[quota] + want[quota] > policy[quota])
      return { quota, limit: policy[quota], inUse: inUse[quota], asked: want[quota] };
  }
  return undefined;
}

export function describeViolation(tenant: string, v: QuotaViolation): string {
  const unit = { liveRuns: '', memoryMb: ' MiB', cpuMillis: ' millicores', diskMb: ' MiB' }[v.quota];
  return `tenant ${tenant} is over its ${v.quota} quota: limit ${v.limit}${unit}, in use ${v.inUse}${unit}, this run asks ${v.asked}${unit}; delete a run first`;
}
