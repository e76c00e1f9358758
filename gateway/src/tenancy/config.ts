import { Type, type Static } from '@sinclair/typebox';

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
  /** CallTools in flight at once (past the rate limit); more wait in the tenant's own line. */
  callsInFlight: number;
  /** CallTools that may wait for a slot at once; one more is refused. */
  queuedCalls: number;
}

const rate = Type.Object(
  {
    perSecond: Type.Optional(Type.Number({ exclusiveMinimum: 0, description: 'tokens added per second' })),
    burst: Type.Optional(
      Type.Integer({ minimum: 1, description: 'bucket size: how many calls may arrive at once after a quiet period' }),
    ),
  },
  { additionalProperties: false },
);

/** What the config may set of a tenant's policy: any subset, rates too. */
const policyOverrides = Type.Object(
  {
    liveRuns: Type.Optional(Type.Integer({ minimum: 1 })),
    memoryMb: Type.Optional(Type.Integer({ minimum: 1 })),
    cpuMillis: Type.Optional(Type.Integer({ minimum: 1 })),
    diskMb: Type.Optional(Type.Integer({ minimum: 1 })),
    createRun: Type.Optional(rate),
    callTool: Type.Optional(rate),
    queuedCreates: Type.Optional(Type.Integer({ minimum: 0 })),
    callsInFlight: Type.Optional(Type.Integer({ minimum: 1 })),
    queuedCalls: Type.Optional(Type.Integer({ minimum: 0 })),
  },
  { additionalProperties: false },
);

export type PolicyOverrides = Static<typeof policyOverrides>;

export const BUILTIN_POLICY: Omit<TenantPolicy, 'liveRuns'> = {
  // 50 runs at the default limits (2 GiB, 2 cores, 2 GiB of disk): by default, only the
  // number of live runs binds.
  memoryMb: 50 * 2048,
  cpuMillis: 50 * 2000,
  diskMb: 50 * 2048,
  createRun: { perSecond: 10, burst: 50 },
  callTool: { perSecond: 1000, burst: 5000 },
  queuedCreates: 64,
  // Together at least callTool's burst: a burst the rate limit admits is never refused for want of a slot.
  callsInFlight: 1024,
  queuedCalls: 4096,
};

/** The `tenancy` section of the gateway config (gateway/src/configSchema.ts holds it). */
export const tenancySchema = Type.Object(
  {
    default: Type.Unsafe<PolicyOverrides>({
      ...policyOverrides,
      default: {},
      docDefault: 'built-in (docs/tenancy.md)',
      description:
        "every tenant's policy, over the built-in one: `liveRuns` (default `runs.maxPerTenant`), `memoryMb`, `cpuMillis`, `diskMb` (totals of live runs), `createRun` and `callTool` rates (`perSecond`, `burst`), `queuedCreates`, `callsInFlight`, `queuedCalls`",
    }),
    tenants: Type.Unsafe<Record<string, PolicyOverrides>>({
      type: 'object',
      additionalProperties: policyOverrides,
      default: {},
      description: 'policy overrides by tenant name; every name must be a tenant some token maps to',
    }),
    admission: Type.Object(
      {
        concurrency: Type.Integer({
          minimum: 1,
          default: 8,
          description: 'CreateRuns that talk to the engine at once, across all tenants',
        }),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
);

export type TenancyConfig = Static<typeof tenancySchema>;

export function defaultTenancy(): TenancyConfig {
  return { default: {}, tenants: {}, admission: { concurrency: 8 } };
}

/**
 * What the schema cannot say: a tenant named in `tenancy.tenants` must exist (a typo would
 * otherwise silently give that tenant the default). Throws naming the key.
 */
export function checkTenancy(tenancy: TenancyConfig, tokens: Record<string, string>): void {
  const known = new Set(Object.values(tokens));
  for (const name of Object.keys(tenancy.tenants)) {
    if (!known.has(name)) {
      throw new Error(
        `invalid config: tenancy.tenants.${name}: no token maps to tenant "${name}" (known tenants: ${[...known].sort().join(', ') || 'none'})`,
      );
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
