import { randomUUID } from 'node:crypto';
import { status } from '@grpc/grpc-js';
import { ResourcesEvent } from '../../../protocol/src/resources';
import { TETHER_VERSION } from '../../../protocol/src/version';
import type { GatewayConfig } from '../config';
import type { EgressService } from '../egress/service';
import { GatewayError } from '../errors';
import { logger } from '../log';
import type { Telemetry } from '../observability/Telemetry';
import type { ClaimStore } from '../pool/ClaimStore';
import type { RunPool } from '../pool/RunPool';
import type { Warm } from '../pool/WarmPool';
import {
  LABELS,
  type Sandbox,
  SandboxBackendUnavailableError,
  SandboxPreconditionError,
  type SandboxProvider,
} from '../sandbox/provider';
import type { TemplateCatalog } from '../templates/catalog';
import type { Tenancy } from '../tenancy/Tenancy';
import type { PausedStore } from './PausedStore';
import { RunnerClient } from './RunnerClient';
import { type ClaimSteps, RunRecord, type RunSpec, type RunStarted, type RunState } from './RunRecord';
import type { RunRegistry } from './RunRegistry';
import { checkWorkspace, normalizeSpec } from './specChecks';

export interface RunLifecycleDeps {
  config: GatewayConfig;
  provider: SandboxProvider;
  registry: RunRegistry;
  tenancy: Tenancy;
  templates: Pick<TemplateCatalog, 'imageFor'>;
  egress: EgressService;
  claims: ClaimStore;
  paused: PausedStore;
  pool: RunPool;
  telemetry: Telemetry;
}

/**
 * A run from CreateRun to its end: admission, a cold start or a claim from the warm pool, the
 * runner connection and its watch, DeleteRun, and the sweep of runs idle or alive too long.
 * Every entry point on a tenant's behalf is scoped by tenant.
 */
export class RunLifecycle {
  private sweeper?: NodeJS.Timeout;
  /** Sandboxes the gateway let go of on purpose: their end is not a failure. */
  private readonly letGoOf = new WeakSet<Sandbox>();
  /** Ends seen while a caller that handles them connects: the run's only once it connected. */
  private readonly heldEnds = new WeakMap<Sandbox, (() => void)[]>();
  private readonly startedListeners: ((e: RunStarted) => void)[] = [];

  constructor(private readonly deps: RunLifecycleDeps) {}

  /** Called after every CreateRun that got past the admission checks, with its latency and origin. */
  onRunStarted(listener: (e: RunStarted) => void): void {
    this.startedListeners.push(listener);
  }

  /**
   * A CreateRun's checks at the edge, before anything exists: the rate limit, the spec made
   * whole, a host workspace's root, the template (its image) and the egress grant. A refusal
   * leaves nothing behind. Every way a run is created goes through here.
   */
  async admitSpec(
    tenant: string,
    requested: RunSpec,
  ): Promise<{ spec: RunSpec; hostWorkspace?: string; image?: string }> {
    const { config, provider, tenancy, templates, egress } = this.deps;
    tenancy.limitRate(tenant, 'createRun');
    const spec = normalizeSpec(config, requested);
    const hostWorkspace = spec.workspace ? await checkWorkspace(config.workspaceRoots, spec.workspace) : undefined;
    const image = await templates.imageFor(tenant, spec.template ?? '');
    if (spec.egress) spec.egress = egress.grant(tenant, spec.egress, provider.capabilities.egress);
    return { spec, hostWorkspace, image };
  }

  async create(
    tenant: string,
    requested: RunSpec,
    admitted?: Awaited<ReturnType<RunLifecycle['admitSpec']>>,
  ): Promise<RunRecord> {
    const { registry, tenancy, pool } = this.deps;
    const { spec, hostWorkspace, image } = admitted ?? (await this.admitSpec(tenant, requested));
    // From here to registry.add nothing awaits: the quota check sees every run, queued ones too,
    // and a refusal leaves nothing behind.
    tenancy.checkQuota(tenant, registry.reservedBy(tenant), spec.limits);
    const t0 = performance.now();
    // A warm sandbox needs no engine work, so a claim skips the admission queue. Pooled
    // sandboxes have no egress and an empty managed workspace: runs with either start cold.
    const poolable = !hostWorkspace && !spec.egress;
    const pooled = poolable ? pool.claim(spec.limits, image) : undefined;
    const run = new RunRecord(`run-${randomUUID()}`, tenant, spec, new Date(), pooled ? 'pool' : 'cold');
    const cold = () => tenancy.admit(tenant, () => this.start(run, hostWorkspace, image));
    const started = pooled
      ? this.startClaimed(run, pooled, t0)
      : poolable && pool.isShared
        ? this.claimShared(run, image, t0, cold)
        : cold();
    registry.add(run);
    let steps: Awaited<typeof started>;
    try {
      steps = await started;
    } catch (err) {
      // Refused whole (a precondition the deployment cannot meet): nothing of the run is left.
      registry.remove(run.runId);
      throw err;
    }
    this.reportStarted(run, performance.now() - t0, hostWorkspace !== undefined, steps || undefined);
    return run;
  }

  /** A CreateRun that got past the admission checks, with its latency and origin, for metrics and listeners. */
  reportStarted(run: RunRecord, ms: number, hostWorkspace: boolean, steps?: ClaimSteps): void {
    this.deps.telemetry.runCreated(run, ms, hostWorkspace);
    const e: RunStarted = {
      runId: run.runId,
      tenant: run.tenant,
      start: run.start,
      ms,
      ok: run.state === 'READY',
      ...(steps ? { steps } : {}),
    };
    for (const l of this.startedListeners) l(e);
  }

  /** A claim in the pool every replica shares (an API call, after the run is registered), else a cold start. */
  private async claimShared(
    run: RunRecord,
    image: string | undefined,
    t0: number,
    cold: () => Promise<void>,
  ): Promise<ClaimSteps | undefined> {
    const warm = await this.deps.pool
      .claimShared(run.spec.limits, image, { runId: run.runId, tenant: run.tenant, labels: this.labelsFor(run) })
      .catch((err: Error) => {
        logger.warn({ runId: run.runId, err: err.message }, 'claiming from the shared pool failed; starting cold');
        return undefined;
      });
    if (!warm) {
      await cold();
      return undefined;
    }
    run.claimedFromPool();
    return this.startClaimed(run, warm, t0);
  }

  /**
   * Binds a pooled sandbox to its run: the claim record (the container's labels cannot change)
   * and `bind` over the runner connection the pool holds open, side by side. Either order is
   * safe across a crash before CreateRun answers: a record without a bind is bound on recovery
   * (`initialize`), a bound runner without a record is removed (it answers `ping` with a run).
   */
  private async startClaimed(run: RunRecord, warm: Warm, t0: number): Promise<ClaimSteps | undefined> {
    const { config, provider, claims } = this.deps;
    const { sandbox, runner } = warm;
    const taken = performance.now();
    try {
      this.watch(run, sandbox, runner);
      let recorded = taken;
      // A shared pool's claim is recorded on the sandbox itself, by the claim.
      const record = warm.recorded
        ? Promise.resolve()
        : claims
            .write(sandbox.id, {
              runId: run.runId,
              tenant: run.tenant,
              spec: run.spec,
              createdAt: run.createdAt.toISOString(),
            })
            .then(() => (recorded = performance.now()));
      const bind = runner.bind(
        { runId: run.runId, conversationId: run.spec.conversationId, features: run.spec.features },
        config.runs.startTimeoutSeconds * 1000,
      );
      const [, init] = await Promise.all([record, bind]);
      if ((run.state as RunState) === 'STOPPED') throw new Error('deleted while starting');
      run.becomeReady(init.tools);
      const ready = performance.now();
      return { take: taken - t0, record: recorded - taken, bind: ready - taken };
    } catch (err) {
      this.markFailed(run, `could not start the run: ${(err as Error).message}`);
      runner.dispose();
      await provider.remove(sandbox.id).catch(() => undefined);
      await claims.remove(sandbox.id).catch(() => undefined);
      run.sandboxRemoved();
      return undefined;
    }
  }

  private async start(run: RunRecord, hostWorkspace: string | undefined, image: string | undefined): Promise<void> {
    const { provider, egress } = this.deps;
    if (run.state !== 'STARTING') return; // deleted while it waited for admission
    try {
      const { spec } = run;
      const grant = spec.egress ? await egress.open(run.runId, run.tenant, spec.egress) : undefined;
      const sandbox = await provider.create({
        runId: run.runId,
        tenant: run.tenant,
        hostWorkspace,
        limits: run.spec.limits,
        labels: this.labelsFor(run),
        image,
        egress: grant,
      });
      if ((run.state as RunState) === 'STOPPED') return void (await provider.remove(sandbox.id).catch(() => undefined)); // deleted meanwhile
      await this.connect(run, sandbox);
    } catch (err) {
      this.markFailed(run, `could not start the run: ${(err as Error).message}`);
      if (run.sandbox) await provider.remove(run.sandbox.id).catch(() => undefined);
      await egress.close(run.runId);
      // Its workspace is gone with it: it no longer holds disk.
      run.sandboxRemoved();
      if (err instanceof SandboxPreconditionError)
        throw new GatewayError(status.FAILED_PRECONDITION, `could not start the run: ${err.message}`);
      if (err instanceof SandboxBackendUnavailableError)
        throw new GatewayError(status.UNAVAILABLE, `could not start the run: ${err.message}`);
    }
  }

  /** Everything a restarted gateway needs to find the run again is in its sandbox's labels. */
  labelsFor(run: RunRecord): Record<string, string> {
    return {
      ...run.spec.labels,
      [LABELS.managed]: 'true',
      [LABELS.instance]: this.deps.config.instance,
      [LABELS.runId]: run.runId,
      [LABELS.tenant]: run.tenant,
      [LABELS.version]: TETHER_VERSION,
      [LABELS.spec]: Buffer.from(JSON.stringify({ spec: run.spec, createdAt: run.createdAt.toISOString() })).toString(
        'base64',
      ),
    };
  }

  /**
   * Talks to a sandbox's runner until it answers `initialize`, then watches it: for a cold
   * start, and for a run recovery re-attaches to. With `callerHandlesFailure` (a pause's wake,
   * a resume) an end before the runner answered is the caller's to handle, from the rejection:
   * it has a way back the run's failure would take away.
   */
  async connect(
    run: RunRecord,
    sandbox: Sandbox,
    prepare?: (runner: RunnerClient) => Promise<void>,
    callerHandlesFailure = false,
  ): Promise<void> {
    const { config } = this.deps;
    const runner = new RunnerClient(sandbox);
    if (callerHandlesFailure) this.heldEnds.set(sandbox, []);
    this.watch(run, sandbox, runner);
    try {
      const init = await runner.initialize(
        {
          runId: run.runId,
          conversationId: run.spec.conversationId,
          workspace: sandbox.workspacePath,
          features: run.spec.features,
          settings: config.runner,
          // A memory fork's runner is still bound to the parent it was copied from.
          ...(run.spec.forkedFrom ? { forkOf: run.spec.forkedFrom } : {}),
        },
        config.runs.startTimeoutSeconds * 1000,
      );
      // What must happen before the first call (a resume's restore).
      await prepare?.(runner);
      run.becomeReady(init.tools);
    } catch (err) {
      this.heldEnds.delete(sandbox);
      throw err;
    }
    // Connected: an end that came meanwhile (after the runner answered) is the run's.
    const held = this.heldEnds.get(sandbox) ?? [];
    this.heldEnds.delete(sandbox);
    for (const end of held) end();
  }

  /**
   * The gateway lets go of this sandbox on purpose (a pause): its end, and its runner's, are
   * no longer the run's failure.
   */
  letGo(sandbox: Sandbox): void {
    this.letGoOf.add(sandbox);
  }

  /** Takes back a sandbox let go of for a move that did not happen: its end is the run's again. */
  holdOn(sandbox: Sandbox): void {
    this.letGoOf.delete(sandbox);
  }

  /** The run takes the sandbox and its runner: their end is the run's failure. */
  private watch(run: RunRecord, sandbox: Sandbox, runner: RunnerClient): void {
    run.attach(sandbox, runner);
    const onEnd = (end: () => void) => {
      if (this.letGoOf.has(sandbox)) return;
      const held = this.heldEnds.get(sandbox);
      if (held) held.push(end);
      else end();
    };
    // The connection often notices a dead runner before the sandbox's exit is reported: the
    // run is FAILED from that moment, and the exit's reason (OOM, signal) replaces the
    // provisional one when it arrives.
    runner.onRunEvent(ResourcesEvent.type, (payload) => this.deps.telemetry.runResources(run, payload));
    runner.onGone((err) => onEnd(() => this.markFailed(run, `the runner stopped answering: ${err.message}`, true)));
    void sandbox.exited.then((exit) =>
      onEnd(() => {
        const reason = exit.oomKilled
          ? `the run ran out of memory and its sandbox was killed (OOM)${exit.detail ? `: ${exit.detail}` : ''}`
          : `the run's sandbox ended: ${exit.reason}`;
        this.failed(run, reason, run.sandboxExited(reason));
      }),
    );
  }

  private markFailed(run: RunRecord, reason: string, provisional = false): void {
    this.failed(run, reason, run.fail(reason, provisional));
  }

  /** What follows a transition to FAILED: the log line, and the runner let go. */
  private failed(run: RunRecord, reason: string, left: { runner?: RunnerClient } | undefined): void {
    if (!left) return;
    logger.warn({ runId: run.runId, tenant: run.tenant, reason }, 'run failed');
    this.deps.telemetry.runFailed(run, reason);
    left.runner?.dispose();
  }

  async delete(tenant: string, runId: string): Promise<void> {
    const { registry, telemetry } = this.deps;
    const run = registry.get(tenant, runId);
    const before = run.state;
    await this.stop(run, '');
    registry.remove(runId);
    telemetry.runDeleted(run, before);
  }

  /** Stops a run for `why` (empty for a plain delete) and removes its sandbox, or the workspace a pause kept. */
  async stop(run: RunRecord, why: string): Promise<void> {
    const { provider, claims, egress, telemetry, paused } = this.deps;
    const kept = run.pausedWorkspace;
    // A run paused at memory depth: its stopped sandbox holds the checkpoint and the workspace.
    const checkpointed = kept ? run.pause?.checkpoint?.sandbox : undefined;
    const left = run.stop(why);
    if (checkpointed)
      await provider
        .remove(checkpointed)
        .catch((err) => logger.warn({ runId: run.runId, err: err.message }, 'removing the paused sandbox failed'));
    if (kept) {
      await provider
        .dropWorkspace?.(kept)
        .catch((err) => logger.warn({ runId: run.runId, err: err.message }, 'removing the kept workspace failed'));
      await paused.remove(run.runId).catch(() => undefined);
    }
    if (left.state !== 'STOPPED') telemetry.runStopped(run);
    if (left.state === 'STARTING' || left.state === 'READY' || left.state === 'PAUSING') {
      await left.runner?.shutdown(1500);
      left.runner?.dispose();
    }
    if (run.sandbox) {
      await provider
        .remove(run.sandbox.id)
        .catch((err) => logger.warn({ runId: run.runId, err: err.message }, 'remove failed'));
      // A pooled sandbox serves one run: its claim goes with it, it never returns to the pool.
      if (run.start === 'pool') await claims.remove(run.sandbox.id).catch(() => undefined);
    }
    await egress.close(run.runId);
    logger.info({ runId: run.runId, why: why || 'deleted' }, 'run stopped');
  }

  /** Stops runs idle too long or alive past the maximum lifetime, every `everyMs`. */
  startSweeper(everyMs = 5000): void {
    this.sweeper = setInterval(() => void this.sweep(), everyMs);
    this.sweeper.unref();
  }

  async sweep(now = Date.now()): Promise<void> {
    const { config, provider, registry } = this.deps;
    const { idleTimeoutSeconds, maxLifetimeSeconds } = config.runs;
    for (const run of registry.all()) {
      const ready = run.ready();
      if (!ready) continue;
      if (maxLifetimeSeconds > 0 && now - run.createdAt.getTime() > maxLifetimeSeconds * 1000) {
        await this.stop(run, `stopped: reached the maximum lifetime of ${maxLifetimeSeconds}s`);
      } else if (
        // A replica sees only the calls made through it: idleness is not its to judge alone.
        !provider.capabilities.sharedState &&
        idleTimeoutSeconds > 0 &&
        !ready.runner.busy &&
        now - ready.runner.lastActivity > idleTimeoutSeconds * 1000
      ) {
        await this.stop(run, `stopped: idle for more than ${idleTimeoutSeconds}s`);
      }
    }
  }

  /** On gateway shutdown: stops every run, or only lets go of them when they stay for the next gateway. */
  async close(keep: boolean): Promise<void> {
    if (this.sweeper) clearInterval(this.sweeper);
    const { registry } = this.deps;
    if (keep) {
      for (const run of registry.all()) run.runner?.dispose();
    } else {
      await Promise.all(
        registry.all().map((r) => (r.state === 'STOPPED' ? undefined : this.stop(r, 'gateway shutdown'))),
      );
    }
    registry.clear();
  }
}
