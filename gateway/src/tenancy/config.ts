/**
 * Per-tenant fairness settings: quotas on what live runs reserve, rate limits and the
 * admission queue. One default policy, overridden per tenant by name.
 */

export interface Rate {
  /** Tokens added per second. */
  perSecond: number;
  /** Bucket size: how many calls may arrive at once after a quiet period. */
  burst: number;
}

export interface TenantPolicy {
  /** Live runs (starting, queued or ready). */
  liveRuns: number;
  /** Total memory limit of live runs, MiB. */
  memoryMb: number;
  /** Total CPU limit of live runs, thousandths of a core. */
  cpuMillis: number;
  /** Total disk limit of runs whose workspace exists (live or failed, until deleted), MiB. */
  diskMb: number;
  createRun: Rate;
  callTool: Rate;
  /** CreateRuns that may wait for an admission slot at once. */
  queuedCreates: number;
}

/** Settings given in the config: any subset, rates too. */
export type PolicyOverrides = Partial<Omit<TenantPolicy, 'createRun' | 'callTool'>> & { createRun?: Partial<Rate>; callTool?: Partial<Rate> };

export interface TenancyConfig {
  /** Applies to every tenant; `liveRuns` falls back to `runs.maxPerTenant` when absent. */
  default: PolicyOverrides;
  /** Overrides by tenant name; every name must be a tenant some token maps to. */
  tenants: Record<string, PolicyOverrides>;
  /** CreateRuns that talk to the engine at once, across all tenants. */
  admission: { concurrency: number };
}

export const BUILTIN_POLICY: Omit<TenantPolicy, 'liveRuns'> = {
  // 50 runs at the default limits (2 GiB, 2 cores, 2 GiB of disk): by default, only the
  // number of live runs binds.
  memoryMb: 50 * 2048,
  cpuMillis: 50 * 2000,
  diskMb: 50 * 2048,
  createRun: { perSecond: 10, burst: 50 },
  callTool: { perSecond: 1000, burst: 5000 },
  queuedCreates: 64,
};

export function defaultTenancy(): TenancyConfig {
  return { default: {}, tenants: {}, admission: { concurrency: 8 } };
}

const rateSchema = {
  type: 'object',
  properties: { perSecond: { type: 'number', exclusiveMinimum: 0 }, burst: { type: 'integer', minimum: 1 } },
  additionalProperties: false,
};

const policySchema = {
  type: 'object',
  properties: {
    liveRuns: { type: 'integer', minimum: 1 },
    memoryMb: { type: 'integer', minimum: 1 },
    cpuMillis: { type: 'integer', minimum: 1 },
    diskMb: { type: 'integer', minimum: 1 },
    createRun: rateSchema,
    callTool: rateSchema,
    queuedCreates: { type: 'integer', minimum: 0 },
  },
  additionalProperties: false,
};

/** The `tenancy` section of the gateway config, as JSON Schema. */
export const tenancySchema = {
  type: 'object',
  properties: {
    default: policySchema,
    tenants: { type: 'object', additionalProperties: policySchema },
    admission: { type: 'object', properties: { concurrency: { type: 'integer', minimum: 1 } }, additionalProperties: false },
  },
  additionalProperties: false,
};

/**
 * What the schema cannot say: a tenant named in `tenancy.tenants` must exist (a typo would
 * otherwise silently give that tenant the default). Throws naming the key.
 */
export function checkTenancy(tenancy: TenancyConfig, tokens: Record<string, string>): void {
  const known = new Set(Object.values(tokens));
  for (const name of Object.keys(tenancy.tenants)) {
    if (!known.has(name)) {
      throw new Error(`invalid config: tenancy.tenants.${name}: no token maps to tenant "${name}" (known tenants: ${[...known].sort().join(', ') || 'none'})`);
    }
  }
}

/** The effective policy of one tenant. */
export function policyFor(tenancy: TenancyConfig, tenant: string, maxRunsPerTenant: number): TenantPolicy {
  const over = tenancy.tenants[tenant] ?? {};
  return {
    liveRuns: maxRunsPerTenant,
    ...BUILTIN_POLICY,
    ...tenancy.default,
    ...over,
    createRun: { ...BUILTIN_POLICY.createRun, ...tenancy.default.createRun, ...over.createRun },
    callTool: { ...BUILTIN_POLICY.callTool, ...tenancy.default.callTool, ...over.callTool },
  };
}
