import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { ResourceCounts, ResourceKind } from '../../../protocol/src/resources';

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

/** What one live run uses now, as its provider measures it (disk 0 when it cannot tell). */
export interface RunUsage {
  tenant: string;
  memoryBytes: number;
  cpuSeconds: number;
  diskBytes: number;
}

/** A source the gauges read at scrape time, so nothing has to be kept in step by hand. */
export interface RunCensus {
  /** [tenant, state] of every run the gateway holds. */
  states(): Iterable<readonly [string, string]>;
  /** What each live run uses now, where its provider reports it. */
  usage?(): Promise<RunUsage[]>;
  /** The language servers and kernels of every live run, as their runners last reported them. */
  resources?(): Iterable<ResourceCounts>;
  /** The warm pool's classes (configured, so a bounded label) and their sandboxes now. */
  pool?(): { key: string; idle: number; starting: number }[];
  /** Requests this gateway made to its provider's backend since it started, by kind (a cluster's API server). */
  backendRequests?(): Record<string, number>;
}

/** Distinct server or kernel names one gateway labels; more become `other` (a runner cannot mint series). */
export const MAX_RESOURCE_NAMES = 32;
const RESOURCE_NAME = /^[a-z0-9][a-z0-9_.-]{0,31}$/;

/** The Prometheus series of one gateway, on a registry of its own. */
export class Metrics {
  readonly registry = new Registry();
  private census?: RunCensus;

  readonly runsCreated: Counter<'tenant'>;
  readonly runsFailed: Counter<'tenant' | 'reason'>;
  readonly runsDeleted: Counter<'tenant'>;
  readonly createRunSeconds: Histogram<'start' | 'outcome'>;
  readonly runLifetimeSeconds: Histogram<'tenant'>;
  readonly pauseSeconds: Histogram<'move' | 'depth' | 'outcome'>;
  readonly pauseStateBytes: Histogram<'depth'>;
  readonly calls: Counter<'tool' | 'tier' | 'outcome'>;
  readonly callSeconds: Histogram<'tool' | 'tier' | 'outcome'>;
  readonly callsInFlight: Gauge;
  readonly questions: Counter<'kind' | 'answer'>;
  readonly approvals: Counter<'tier' | 'decision'>;
  readonly bridged: Counter<'target' | 'outcome'>;
  readonly authFailures: Counter<'method'>;
  readonly egressRequests: Counter<'tenant' | 'outcome'>;
  readonly rpcs: Counter<'method' | 'code'>;
  readonly rateLimited: Counter<'tenant' | 'kind'>;
  private readonly tenantMemory: Gauge<'tenant'>;
  private readonly runMemoryMax: Gauge<'tenant'>;
  private readonly tenantCpu: Gauge<'tenant'>;
  private readonly tenantDisk: Gauge<'tenant'>;
  private readonly runDiskMax: Gauge<'tenant'>;
  private readonly resourceNames = new Map<ResourceKind, Set<string>>();
  readonly languageServerStarts: Counter<'server'>;
  readonly languageServerRestarts: Counter<'server' | 'cause'>;
  readonly kernelStarts: Counter<'language'>;
  readonly kernelRestarts: Counter<'language' | 'cause'>;

  constructor(opts: { defaults?: boolean } = {}) {
    const registers = [this.registry];
    if (opts.defaults ?? true) collectDefaultMetrics({ register: this.registry, prefix: 'tether_gateway_' });
    const self = this;
    new Gauge({
      name: 'tether_pool_sandboxes',
      help: 'Warm pool sandboxes by class (limits, and a template image as a hash) and state: idle (ready to claim) or starting',
      labelNames: ['class', 'state'] as const,
      registers,
      collect() {
        this.reset();
        for (const c of self.census?.pool?.() ?? []) {
          this.set({ class: c.key, state: 'idle' }, c.idle);
          this.set({ class: c.key, state: 'starting' }, c.starting);
        }
      },
    });
    new Counter({
      name: 'tether_provider_api_requests_total',
      help: "Requests to the provider's backend (the Kubernetes API server) by kind: list, watch, get, create, patch, delete, update, exec, attach",
      labelNames: ['kind'] as const,
      registers,
      collect() {
        this.reset();
        for (const [kind, n] of Object.entries(self.census?.backendRequests?.() ?? {})) this.inc({ kind }, n);
      },
    });
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
    this.pauseSeconds = new Histogram({
      name: 'tether_run_pause_duration_seconds',
      help: "How long a pause (move=pause) or a resume (move=resume, a fork's start too) took, by depth, until PAUSED or READY",
      labelNames: ['move', 'depth', 'outcome'],
      buckets: [0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60],
      registers,
    });
    this.pauseStateBytes = new Histogram({
      name: 'tether_run_pause_state_bytes',
      help: 'Bytes a pause wrote beside the workspace, by depth',
      labelNames: ['depth'],
      buckets: [1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9],
      registers,
    });
    this.createRunSeconds = new Histogram({
      name: 'tether_create_run_duration_seconds',
      help: 'CreateRun latency until the run is ready or failed; start is cold (a new sandbox), pool, or template (restored from its template snapshot)',
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
      help: 'Calls refused as UNAUTHENTICATED, by method (gRPC or Connect)',
      labelNames: ['method'],
      registers,
    });
    this.egressRequests = new Counter({
      name: 'tether_egress_requests_total',
      help: "Requests through runs' egress proxies, by tenant and outcome (allowed, refused)",
      labelNames: ['tenant', 'outcome'],
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
    this.tenantDisk = new Gauge({
      name: 'tether_tenant_disk_bytes',
      help: "Disk used now by a tenant's live runs' workspaces, summed (runs whose provider cannot tell count 0)",
      labelNames: ['tenant'],
      registers,
    });
    this.runDiskMax = new Gauge({
      name: 'tether_run_disk_max_bytes',
      help: "Disk used now by a tenant's largest live run workspace",
      labelNames: ['tenant'],
      registers,
    });
    const alive = (kind: ResourceKind, label: 'server' | 'language') =>
      function (this: Gauge<'server' | 'language'>) {
        this.reset();
        const counts = new Map<string, number>();
        for (const r of self.census?.resources?.() ?? [])
          if (r.kind === kind) {
            const name = self.resourceName(kind, r.name);
            counts.set(name, (counts.get(name) ?? 0) + r.alive);
          }
        for (const [name, n] of counts) this.set({ [label]: name }, n);
      };
    new Gauge({
      name: 'tether_language_servers',
      help: 'Language servers alive in live runs, by server',
      labelNames: ['server'] as const,
      registers,
      collect: alive('language_server', 'server'),
    });
    new Gauge({
      name: 'tether_kernels',
      help: 'Eval kernels alive in live runs, by language',
      labelNames: ['language'] as const,
      registers,
      collect: alive('kernel', 'language'),
    });
    this.languageServerStarts = new Counter({
      name: 'tether_language_server_starts_total',
      help: 'Language servers started in runs (restarts included), by server',
      labelNames: ['server'],
      registers,
    });
    this.languageServerRestarts = new Counter({
      name: 'tether_language_server_restarts_total',
      help: 'Language server starts that replaced one: cause crash (it died) or request (lsp reload)',
      labelNames: ['server', 'cause'],
      registers,
    });
    this.kernelStarts = new Counter({
      name: 'tether_kernel_starts_total',
      help: 'Eval kernels started in runs (restarts included), by language',
      labelNames: ['language'],
      registers,
    });
    this.kernelRestarts = new Counter({
      name: 'tether_kernel_restarts_total',
      help: 'Eval kernel starts that replaced one: cause crash (it died or was killed at a timeout) or request (reset)',
      labelNames: ['language', 'cause'],
      registers,
    });
    this.rpcs = new Counter({
      name: 'tether_grpc_requests_total',
      help: 'tether.v1.Gateway requests (over gRPC and Connect alike), by method and status code',
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

  /** A server id or kernel language as a label: well-formed and among the first few seen, else `other`. */
  resourceName(kind: ResourceKind, name: string): string {
    let seen = this.resourceNames.get(kind);
    if (!seen) this.resourceNames.set(kind, (seen = new Set()));
    if (seen.has(name)) return name;
    if (!RESOURCE_NAME.test(name) || seen.size >= MAX_RESOURCE_NAMES) return 'other';
    seen.add(name);
    return name;
  }

  /** Moves the start and restart counters by what a run's new report adds to its last one. */
  countResources(before: readonly ResourceCounts[], now: readonly ResourceCounts[]): void {
    const prev = new Map(before.map((c) => [`${c.kind}\u0000${c.name}`, c]));
    for (const c of now) {
      const p = prev.get(`${c.kind}\u0000${c.name}`);
      const more = (k: 'starts' | 'restartsAfterCrash' | 'restartsRequested') => {
        const d = (Number(c[k]) || 0) - (Number(p?.[k]) || 0);
        return d > 0 && d < 1e6 ? d : 0;
      };
      const name = this.resourceName(c.kind, c.name);
      const [starts, restarts, label] = (
        c.kind === 'kernel'
          ? [this.kernelStarts, this.kernelRestarts, 'language']
          : [this.languageServerStarts, this.languageServerRestarts, 'server']
      ) as [Counter<string>, Counter<string>, string];
      if (more('starts')) starts.inc({ [label]: name }, more('starts'));
      if (more('restartsAfterCrash')) restarts.inc({ [label]: name, cause: 'crash' }, more('restartsAfterCrash'));
      if (more('restartsRequested')) restarts.inc({ [label]: name, cause: 'request' }, more('restartsRequested'));
    }
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
    for (const g of [this.tenantMemory, this.runMemoryMax, this.tenantCpu, this.tenantDisk, this.runDiskMax]) g.reset();
    const by = new Map<string, { sum: number; max: number; cpu: number; disk: number; diskMax: number }>();
    for (const u of usage) {
      const t = by.get(u.tenant) ?? { sum: 0, max: 0, cpu: 0, disk: 0, diskMax: 0 };
      t.sum += u.memoryBytes;
      t.max = Math.max(t.max, u.memoryBytes);
      t.cpu += u.cpuSeconds;
      t.disk += u.diskBytes;
      t.diskMax = Math.max(t.diskMax, u.diskBytes);
      by.set(u.tenant, t);
    }
    for (const [tenant, t] of by) {
      this.tenantMemory.set({ tenant }, t.sum);
      this.runMemoryMax.set({ tenant }, t.max);
      this.tenantCpu.set({ tenant }, t.cpu);
      this.tenantDisk.set({ tenant }, t.disk);
      this.runDiskMax.set({ tenant }, t.diskMax);
    }
  }
}
