import { status } from '@grpc/grpc-js';
import { GatewayError, notFound } from '../errors';
import { logger } from '../log';
import type { RunUsage } from '../observability/metrics';
import type { SandboxProvider, SandboxUsage } from '../sandbox/provider';
import type { Reserved } from '../tenancy/quota';
import type { ReadyRun, RunRecord } from './RunRecord';

/** How long a live run's usage may take to read at metrics scrape time before it is left out. */
const USAGE_TIMEOUT_MS = 2000;

/**
 * The runs this gateway knows, by id. Every lookup on a tenant's behalf is scoped by tenant:
 * another tenant's run is indistinguishable from one that does not exist.
 */
export class RunRegistry {
  private readonly runs = new Map<string, RunRecord>();

  /** `provider` is read for what a run uses now (GetRun), when it can say, or says its runners do. */
  constructor(private readonly provider: Pick<SandboxProvider, 'usage' | 'capabilities'>) {}

  /**
   * How a run's usage is read now: from its runner where the provider says so, else from the
   * provider (GetRun) or the sandbox's own reader (metrics, at scrape time).
   */
  private reader(run: RunRecord, via: 'provider' | 'sandbox'): (() => Promise<SandboxUsage>) | undefined {
    if (this.provider.capabilities.usageFromRunner) {
      const runner = run.runner;
      return runner ? () => runner.usage(USAGE_TIMEOUT_MS) : undefined;
    }
    const sandbox = run.sandbox;
    if (via === 'sandbox') return sandbox?.usage ? () => sandbox.usage!() : undefined;
    return sandbox && this.provider.usage ? () => this.provider.usage!(sandbox.id) : undefined;
  }

  add(run: RunRecord): void {
    this.runs.set(run.runId, run);
  }

  remove(runId: string): void {
    this.runs.delete(runId);
  }

  has(runId: string): boolean {
    return this.runs.has(runId);
  }

  /** The run of this id, of whichever tenant: for the gateway's own work, like `all`. */
  find(runId: string): RunRecord | undefined {
    return this.runs.get(runId);
  }

  /** Every run, of every tenant: for the gateway's own work (sweeps, recovery, metrics), never for a tenant. */
  all(): RunRecord[] {
    return [...this.runs.values()];
  }

  clear(): void {
    this.runs.clear();
  }

  get(tenant: string, runId: string): RunRecord {
    const run = this.runs.get(runId);
    if (!run || run.tenant !== tenant) throw notFound(`run ${runId} not found`);
    return run;
  }

  list(tenant: string): RunRecord[] {
    return this.all().filter((r) => r.tenant === tenant);
  }

  /** The run, only if it can take a tool call now. */
  ready(tenant: string, runId: string): ReadyRun {
    const run = this.get(tenant, runId);
    if (run.state === 'FAILED')
      throw new GatewayError(status.FAILED_PRECONDITION, `run ${runId} has failed: ${run.error}`);
    const ready = run.ready();
    if (!ready) throw new GatewayError(status.FAILED_PRECONDITION, `run ${runId} is ${run.state.toLowerCase()}`);
    if (ready.runner.failure)
      throw new GatewayError(status.UNAVAILABLE, `run ${runId} is unavailable: ${ready.runner.failure.message}`);
    return ready;
  }

  /**
   * What a tenant's runs hold against its quotas: memory, CPU and a slot while live (queued,
   * starting, ready or pausing); disk while the workspace exists (until DeleteRun, failed and
   * paused runs too).
   */
  reservedBy(tenant: string): Reserved {
    const held: Reserved = { liveRuns: 0, memoryMb: 0, cpuMillis: 0, diskMb: 0 };
    for (const r of this.runs.values()) {
      if (r.tenant !== tenant) continue;
      const live = r.live;
      if (live) {
        held.liveRuns++;
        held.memoryMb += r.spec.limits.memoryMb;
        held.cpuMillis += r.spec.limits.cpuMillis;
      }
      if (live || r.state === 'PAUSED' || (r.state === 'FAILED' && r.sandbox)) held.diskMb += r.spec.limits.diskMb ?? 0;
    }
    return held;
  }

  /** What the run uses now, as its provider measures it; undefined when it cannot say. */
  async usage(run: RunRecord): Promise<SandboxUsage | undefined> {
    const read = run.state === 'STOPPED' ? undefined : this.reader(run, 'provider');
    if (!read) return undefined;
    return read().catch((err: Error) => {
      logger.debug({ runId: run.runId, err: err.message }, 'no usage');
      return undefined;
    });
  }

  /** What each live run uses now; a run whose sandbox cannot say (or takes over 2 s) is left out. */
  async usageByTenant(): Promise<RunUsage[]> {
    const live = this.all().flatMap((r) => {
      const read = r.live ? this.reader(r, 'sandbox') : undefined;
      return read ? [{ r, read }] : [];
    });
    const read = await Promise.all(
      live.map(({ r, read }) =>
        Promise.race([
          read(),
          new Promise<undefined>((res) => setTimeout(() => res(undefined), USAGE_TIMEOUT_MS).unref()),
        ]).then(
          (u) =>
            u
              ? { tenant: r.tenant, memoryBytes: u.memoryBytes, cpuSeconds: u.cpuMillis / 1000, diskBytes: u.diskBytes }
              : undefined,
          () => undefined,
        ),
      ),
    );
    return read.filter((u) => u !== undefined);
  }
}
