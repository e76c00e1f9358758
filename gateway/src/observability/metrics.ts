import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** How a tool call ended, as a bounded label: a result, a cancel, or the gRPC status it failed with. */
export type CallOutcome = 'ok' | 'is_error' | 'cancelled' | string;

/** What the approval gate decided for one call. */
export type ApprovalDecision = 'not_required' | 'auto' | 'approved' | 'denied' | 'policy_denied';

/** How a question card ended. */
export type AnswerKind = 'answered' | 'skipped' | 'timeout' | 'unavailable' | 'approved' | 'denied';

/** Why a run failed, reduced to a fixed set so it can be a label. */
export type FailureReason = 'start_failed' | 'oom' | 'sandbox_exited' | 'runner_gone' | 'other';

/** Label value for a tool name that is not in the run's registry (names from the client are unbounded). */
export const UNKNOWN_TOOL = 'unknown';

export function failureReason(reason: string): FailureReason {
  if (/\(OOM\)/.test(reason)) return 'oom';
  if (reason.startsWith('could not start the run')) return 'start_failed';
  if (reason.startsWith('the runner stopped answering')) return 'runner_gone';
  if (reason.startsWith("the run's sandbox ended")) return 'sandbox_exited';
  return 'other';
}

/** A source the gauges read at scrape time, so nothing has to be kept in step by hand. */
export interface RunCensus {
  /** [tenant, state] of every run the gateway holds. */
  states(): Iterable<readonly [string, string]>;
  /** What each live run uses now, where its provider reports it. */
  usage?(): Promise<{ tenant: string; memoryBytes: number; cpuSeconds: number }[]>;
}

/** The Prometheus series of one gateway, on a registry of its own. */
export class Metrics {
  readonly registry = new Registry();
  private census?: RunCensus;

  readonly runsCreated: Counter<'tenant'>;
  readonly runsFailed: Counter<'tenant' | 'reason'>;
  readonly runsDeleted: Counter<'tenant'>;
  readonly createRunSeconds: Histogram<'start' | 'outcome'>;
  readonly runLifetimeSeconds: Histogram<'tenant'>;
  readonly calls: Counter<'tool' | 'tier' | 'outcome'>;
  readonly callSeconds: Histogram<'tool' | 'tier' | 'outcome'>;
  readonly callsInFlight: Gauge;
  readonly questions: Counter<'kind' | 'answer'>;
  readonly approvals: Counter<'tier' | 'decision'>;
  readonly bridged: Counter<'target' | 'outcome'>;
  readonly authFailures: Counter<'method'>;
  readonly rpcs: Counter<'method' | 'code'>;
  readonly rateLimited: Counter<'tenant' | 'kind'>;
  private readonly tenantMemory: Gauge<'tenant'>;
  private readonly runMemoryMax: Gauge<'tenant'>;
  private readonly tenantCpu: Gauge<'tenant'>;

  constructor(opts: { defaults?: boolean } = {}) {
    const registers = [this.registry];
    if (opts.defaults ?? true) collectDefaultMetrics({ register: this.registry, prefix: 'tether_gateway_' });
    const self = this;
    new Gauge({
      name: 'tether_runs',
      help: 'Runs the gateway holds, by state and tenant',
      labelNames: ['state', 'tenant'] as const,
      registers,
      collect() {
        this.reset();
        if (!self.census) return;
        const counts = new Map<string, number>();
        for (const [tenant, state] of self.census.states())
          counts.set(`${state}\u0000${tenant}`, (counts.get(`${state}\u0000${tenant}`) ?? 0) + 1);
        for (const [k, n] of counts) {
          const [state, tenant] = k.split('\u0000');
          this.set({ state, tenant }, n);
        }
      },
    });
    this.runsCreated = new Counter({
      name: 'tether_runs_created_total',
      help: 'CreateRun requests that made a run',
      labelNames: ['tenant'],
      registers,
    });
    this.runsFailed = new Counter({
      name: 'tether_runs_failed_total',
      help: 'Runs that failed, by reason',
      labelNames: ['tenant', 'reason'],
      registers,
    });
    this.runsDeleted = new Counter({
      name: 'tether_runs_deleted_total',
      help: 'Runs removed by DeleteRun',
      labelNames: ['tenant'],
      registers,
    });
    this.createRunSeconds = new Histogram({
      name: 'tether_create_run_duration_seconds',
      help: 'CreateRun latency until the run is ready or failed; start is cold (a new sandbox) or pool',
      labelNames: ['start', 'outcome'],
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60],
      registers,
    });
    this.runLifetimeSeconds = new Histogram({
      name: 'tether_run_lifetime_seconds',
      help: 'How long runs lived, observed when they stop',
      labelNames: ['tenant'],
      buckets: [1, 10, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 24 * 3600],
      registers,
    });
    const callLabels = ['tool', 'tier', 'outcome'] as const;
    this.calls = new Counter({
      name: 'tether_calls_total',
      help: 'Tool calls, by tool, tier and outcome',
      labelNames: callLabels,
      registers,
    });
    this.callSeconds = new Histogram({
      name: 'tether_call_duration_seconds',
      help: 'Tool call latency, from the start message to the result or status',
      labelNames: callLabels,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
      registers,
    });
    this.callsInFlight = new Gauge({ name: 'tether_calls_in_flight', help: 'Tool calls in progress', registers });
    this.questions = new Counter({
      name: 'tether_questions_total',
      help: 'Question cards shown to a human, by kind (ask, permission) and how they ended',
      labelNames: ['kind', 'answer'],
      registers,
    });
    this.approvals = new Counter({
      name: 'tether_approvals_total',
      help: 'Approval gate decisions for write- and exec-tier calls',
      labelNames: ['tier', 'decision'],
      registers,
    });
    this.bridged = new Counter({
      name: 'tether_bridged_calls_total',
      help: 'tool() calls made from inside a running tool, by where they ran (gateway: a run tool, client: bridged out) and outcome',
      labelNames: ['target', 'outcome'],
      registers,
    });
    this.authFailures = new Counter({
      name: 'tether_auth_failures_total',
      help: 'Calls refused as UNAUTHENTICATED, by gRPC method',
      labelNames: ['method'],
      registers,
    });
    this.tenantMemory = new Gauge({
      name: 'tether_tenant_memory_bytes',
      help: "Memory used now by a tenant's live runs, summed",
      labelNames: ['tenant'],
      registers,
    });
    this.runMemoryMax = new Gauge({
      name: 'tether_run_memory_max_bytes',
      help: "Memory used now by a tenant's largest live run",
      labelNames: ['tenant'],
      registers,
    });
    this.tenantCpu = new Gauge({
      name: 'tether_tenant_cpu_seconds',
      help: "CPU time used so far by a tenant's live runs, summed (falls when a run ends: take deriv(), not rate())",
      labelNames: ['tenant'],
      registers,
    });
    this.rpcs = new Counter({
      name: 'tether_grpc_requests_total',
      help: 'gRPC requests, by method and status code',
      labelNames: ['method', 'code'],
      registers,
    });
    this.rateLimited = new Counter({
      name: 'tether_rate_limited_total',
      help: 'Calls refused by a tenant rate limit, by tenant and kind (createRun, callTool); added once a second',
      labelNames: ['tenant', 'kind'],
      registers,
    });
  }

  watchRuns(census: RunCensus): void {
    this.census = census;
  }

  /** The page as served: run resources are sampled first, one provider read per live run. */
  async text(): Promise<string> {
    await this.sampleUsage();
    return this.registry.metrics();
  }

  /** Per-tenant aggregates only: a run id would make one series per run. */
  private async sampleUsage(): Promise<void> {
    if (!this.census?.usage) return;
    const usage = await this.census.usage();
    for (const g of [this.tenantMemory, this.runMemoryMax, this.tenantCpu]) g.reset();
    const by = new Map<string, { sum: number; max: number; cpu: number }>();
    for (const u of usage) {
      const t = by.get(u.tenant) ?? { sum: 0, max: 0, cpu: 0 };
      t.sum += u.memoryBytes;
      t.max = Math.max(t.max, u.memoryBytes);
      t.cpu += u.cpuSeconds;
      by.set(u.tenant, t);
    }
    for (const [tenant, t] of by) {
      this.tenantMemory.set({ tenant }, t.sum);
      this.runMemoryMax.set({ tenant }, t.max);
      this.tenantCpu.set({ tenant }, t.cpu);
    }
  }
}
