import { ResourcesEvent } from '../../../protocol/src/resources';
import { randomUUID } from 'node:crypto';
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import type { GatewayConfig } from '../config';
import { invalid, notFound, GatewayError } from '../errors';
import { status } from '@grpc/grpc-js';
import { logger } from '../log';
import {
  LABELS,
  SandboxPreconditionError,
  type Sandbox,
  type SandboxProvider,
  type SandboxUsage,
} from '../sandbox/provider';
import { ClaimStore } from '../pool/ClaimStore';
import { classKey, WarmPool, type Warm } from '../pool/WarmPool';
import { Tenancy } from '../tenancy/Tenancy';
import type { Reserved } from '../tenancy/quota';
import type { RunUsage } from '../observability/metrics';
import { Telemetry } from '../observability/Telemetry';
import { RunnerClient } from './RunnerClient';
import { EgressService } from '../egress/service';
import { TemplateCatalog } from '../templates/catalog';
import { RunRecord, type ReadyRun, type RunSpec, type RunStart, type RunState } from './RunRecord';

export type { ApprovalPolicy, ReadyRun, RunPhase, RunSpec, RunStart, RunState } from './RunRecord';
export { RunRecord } from './RunRecord';

const VERSION = '0.1.0';
const LABEL_KEY = /^[a-zA-Z0-9][a-zA-Z0-9._\-/]{0,62}$/;
/** The admission queue's name for pool refills: no tenant can be called this. */
const POOL_LINE = '\0pool';
/** How long an idle pooled sandbox found on start-up may take to show it is healthy. */
const ADOPT_TIMEOUT_MS = 5000;
/** How often a replica sharing its runs with others looks for runs they created. */
const DISCOVER_EVERY_MS = 2000;
const FORGET_GONE_AFTER_MS = 5 * 60_000;

/** One CreateRun's outcome, for metrics: how long it took and where its sandbox came from. */
export interface RunStarted {
  runId: string;
  tenant: string;
  start: RunStart;
  ms: number;
  ok: boolean;
  /**
   * For a claim, ms: taking a sandbox; then, side by side from there, writing its claim record
   * and `bind` (to the run READY).
   */
  steps?: ClaimSteps;
}

export interface ClaimSteps {
  take: number;
  record: number;
  bind: number;
}

/** Creates, finds, watches and removes runs; scoped by tenant at every entry point. */
export class RunManager {
  private readonly runs = new Map<string, RunRecord>();
  private sweeper?: NodeJS.Timeout;
  private discoverer?: NodeJS.Timeout;
  private discovering = false;
  /** Runs whose sandbox another replica (or the cluster) removed, and since when. */
  private readonly goneSince = new Map<string, number>();
  readonly tenancy: Tenancy;
  private readonly templates: TemplateCatalog;
  readonly egress: EgressService;
  /** Started sandboxes waiting for runs; undefined until startPool (and when it is off). */
  pool?: WarmPool;
  private readonly claims: ClaimStore;
  /** Idle pooled sandboxes an earlier gateway left, checked by recover, for startPool to adopt. */
  private adoptable: { key: string; warm: Warm }[] = [];
  private readonly startedListeners: ((e: RunStarted) => void)[] = [];

  constructor(
    private readonly config: GatewayConfig,
    readonly provider: SandboxProvider,
    private readonly telemetry: Telemetry = Telemetry.off,
  ) {
    this.tenancy = new Tenancy(config.tenancy, config.runs.maxPerTenant);
    this.tenancy.onRefusals((r) => telemetry.rateLimited(r));
    this.templates = new TemplateCatalog(config, provider.capabilities.templateImages);
    this.egress = new EgressService(config, (r) => telemetry.egress(r));
    telemetry.watchRuns({
      states: () => [...this.runs.values()].map((r) => [r.tenant, r.state] as const),
      usage: () => this.usageByTenant(),
      resources: () => [...this.runs.values()].flatMap((r) => (r.live ? (r.resources ?? []) : [])),
      pool: () => this.pool?.stats().classes ?? [],
    });
    this.claims = new ClaimStore(path.join(config.stateDir, 'pool', config.instance, 'claims'));
  }

  /** The limits a CreateRun that asks for none gets: the pool's default class. */
  defaultLimits(): RunSpec['limits'] {
    const { default: d, max: m } = this.config.limits;
    return {
      memoryMb: Math.min(d.memoryMb, m.memoryMb),
      cpuMillis: Math.min(d.cpuMillis, m.cpuMillis),
      pids: Math.min(d.pids, m.pids),
      diskMb: Math.min(d.diskMb, m.diskMb),
    };
  }

  /**
   * Starts keeping warm sandboxes for runs with the default limits (after recover): of the
   * runner image, and of each template `pool.templates` names that is built on it.
   */
  async startPool(): Promise<void> {
    const { size, maxTotal, maxMemoryMb, concurrency } = this.config.pool;
    // Claims are kept in this replica's state directory, which replicas sharing runs do not share.
    if (this.provider.shared) return;
    const targets = [{ limits: this.defaultLimits(), size }, ...(await this.templateTargets())];
    if (maxTotal > 0 && targets.some((t) => t.size > 0) && !this.pool) {
      this.pool = new WarmPool({
        provider: this.provider,
        instance: this.config.instance,
        targets,
        maxTotal,
        maxMemoryMb,
        concurrency,
        prepare: (sandbox) => this.prepare(sandbox),
        admit: (start) => this.tenancy.admission.submit(POOL_LINE, Number.MAX_SAFE_INTEGER, start),
      });
    }
    // What an earlier gateway left idle fills the pool first; what does not fit is removed.
    for (const { key, warm } of this.adoptable.splice(0)) {
      if (this.pool?.adopt(key, warm)) continue;
      warm.runner.dispose();
      void this.provider.remove(warm.sandbox.id).catch(() => undefined);
    }
    this.pool?.start();
  }

  /** Pool classes of templates: one a template not (yet) built on this runner image is left out, with a warning. */
  private async templateTargets(): Promise<{ limits: RunSpec['limits']; image: string; size: number }[]> {
    const out = [];
    for (const [name, size] of Object.entries(this.config.pool.templates)) {
      if (size <= 0) continue;
      try {
        const image = await this.templates.imageOf(name);
        out.push({ limits: this.defaultLimits(), image, size });
      } catch (err) {
        logger.warn({ template: name, err: (err as Error).message }, 'template not pooled');
      }
    }
    return out;
  }

  /** Opens a pooled sandbox's runner connection and readies it for any run. */
  private async prepare(sandbox: Sandbox): Promise<RunnerClient> {
    const runner = new RunnerClient(sandbox);
    try {
      await runner.prepare(
        { workspace: sandbox.workspacePath, settings: this.config.runner },
        this.config.runs.startTimeoutSeconds * 1000,
      );
      return runner;
    } catch (err) {
      runner.dispose();
      throw err;
    }
  }

  /** Called after every CreateRun that got past the admission checks, with its latency and origin. */
  onRunStarted(listener: (e: RunStarted) => void): void {
    this.startedListeners.push(listener);
  }

  /** Checks a CreateRun request against the server's rules before anything starts. */
  normalize(spec: RunSpec): RunSpec {
    if (spec.conversationId.length > 256) throw invalid('conversation_id is longer than 256 characters');
    if (spec.features.questions.enabled && !spec.features.questions.targetSpace.trim()) {
      throw invalid('features.questions needs a target_space: somewhere the card is shown');
    }
    for (const [k, v] of Object.entries(spec.labels)) {
      if (!LABEL_KEY.test(k) || k.startsWith('dev.tether.'))
        throw invalid(`label key ${JSON.stringify(k)} is not allowed`);
      if (v.length > 256) throw invalid(`label ${k} is longer than 256 characters`);
    }
    if (Object.keys(spec.labels).length > 32) throw invalid('at most 32 labels');
    const max = this.config.limits.max;
    const def = this.config.limits.default;
    const pick = (asked: number, d: number, m: number, name: string) => {
      if (asked > m) throw invalid(`limits.${name} ${asked} is above the server maximum ${m}`);
      return asked > 0 ? asked : Math.min(d, m);
    };
    // A host workspace belongs to the platform: the gateway neither sizes nor reserves it.
    if (spec.workspace && spec.limits.diskMb > 0)
      throw invalid('limits.disk_mb applies only to workspaces the gateway creates, not to a host workspace');
    const limits = {
      memoryMb: pick(spec.limits.memoryMb, def.memoryMb, max.memoryMb, 'memory_mb'),
      cpuMillis: pick(spec.limits.cpuMillis, def.cpuMillis, max.cpuMillis, 'cpu_millis'),
      pids: pick(spec.limits.pids, def.pids, max.pids, 'pids'),
      diskMb: spec.workspace ? 0 : pick(spec.limits.diskMb ?? 0, def.diskMb, max.diskMb, 'disk_mb'),
    };
    if (limits.memoryMb < 64) throw invalid('limits.memory_mb must be at least 64');
    if (limits.pids < 16) throw invalid('limits.pids must be at least 16');
    if (!spec.workspace && limits.diskMb < 16) throw invalid('limits.disk_mb must be at least 16');
    return { ...spec, limits };
  }

  private async checkWorkspace(dir: string): Promise<string> {
    if (!path.isAbsolute(dir)) throw invalid('workspace must be an absolute host path');
    let real: string;
    try {
      real = await fs.realpath(dir);
    } catch {
      throw invalid(`workspace ${dir} does not exist`);
    }
    for (const root of this.config.workspaceRoots) {
      const r = await fs.realpath(root).catch(() => path.resolve(root));
      if (real === r || real.startsWith(r + path.sep)) return real;
    }
    throw new GatewayError(status.PERMISSION_DENIED, `workspace ${dir} is not under a root this server allows`);
  }

  async create(tenant: string, requested: RunSpec): Promise<RunRecord> {
    this.tenancy.limitRate(tenant, 'createRun');
    const spec = this.normalize(requested);
    const hostWorkspace = spec.workspace ? await this.checkWorkspace(spec.workspace) : undefined;
    // Template and egress are checked before anything exists, so a refusal leaves nothing behind.
    const image = await this.templates.imageFor(tenant, spec.template ?? '');
    if (spec.egress) spec.egress = this.egress.grant(tenant, spec.egress, this.provider.name);
    // From here to runs.set nothing awaits: the quota check sees every run, queued ones too,
    // and a refusal leaves nothing behind.
    this.tenancy.checkQuota(tenant, this.reservedBy(tenant), spec.limits);
    const t0 = performance.now();
    // A warm sandbox needs no engine work, so a claim skips the admission queue. Pooled
    // sandboxes have no egress and an empty managed workspace: runs with either start cold.
    const pooled = hostWorkspace || spec.egress ? undefined : this.pool?.claim(spec.limits, image);
    const run = new RunRecord(`run-${randomUUID()}`, tenant, spec, new Date(), pooled ? 'pool' : 'cold');
    const started = pooled
      ? this.startClaimed(run, pooled, t0)
      : this.tenancy.admit(tenant, () => this.start(run, hostWorkspace, image));
    this.runs.set(run.runId, run);
    let steps: Awaited<typeof started>;
    try {
      steps = await started;
    } catch (err) {
      // Refused whole (a precondition the deployment cannot meet): nothing of the run is left.
      this.runs.delete(run.runId);
      throw err;
    }
    const ms = performance.now() - t0;
    this.telemetry.runCreated(run, ms, hostWorkspace !== undefined);
    const e: RunStarted = {
      runId: run.runId,
      tenant,
      start: run.start,
      ms,
      ok: run.state === 'READY',
      ...(steps ? { steps } : {}),
    };
    for (const l of this.startedListeners) l(e);
    return run;
  }

  /**
   * Binds a pooled sandbox to its run: the claim record (the container's labels cannot change)
   * and `bind` over the runner connection the pool holds open, side by side. Either order is
   * safe across a crash before CreateRun answers: a record without a bind is bound on recovery
   * (`initialize`), a bound runner without a record is removed (it answers `ping` with a run).
   */
  private async startClaimed(run: RunRecord, warm: Warm, t0: number): Promise<ClaimSteps | undefined> {
    const { sandbox, runner } = warm;
    const taken = performance.now();
    try {
      this.watch(run, sandbox, runner);
      let recorded = 0;
      const record = this.claims
        .write(sandbox.id, {
          runId: run.runId,
          tenant: run.tenant,
          spec: run.spec,
          createdAt: run.createdAt.toISOString(),
        })
        .then(() => (recorded = performance.now()));
      const bind = runner.bind(
        { runId: run.runId, conversationId: run.spec.conversationId, features: run.spec.features },
        this.config.runs.startTimeoutSeconds * 1000,
      );
      const [, init] = await Promise.all([record, bind]);
      if ((run.state as RunState) === 'STOPPED') throw new Error('deleted while starting');
      run.becomeReady(init.tools);
      const ready = performance.now();
      return { take: taken - t0, record: recorded - taken, bind: ready - taken };
    } catch (err) {
      this.markFailed(run, `could not start the run: ${(err as Error).message}`);
      runner.dispose();
      await this.provider.remove(sandbox.id).catch(() => undefined);
      await this.claims.remove(sandbox.id).catch(() => undefined);
      run.sandboxRemoved();
      return undefined;
    }
  }

  private async start(run: RunRecord, hostWorkspace: string | undefined, image: string | undefined): Promise<void> {
    if (run.state !== 'STARTING') return; // deleted while it waited for admission
    try {
      const { spec } = run;
      const egress = spec.egress ? await this.egress.open(run.runId, run.tenant, spec.egress) : undefined;
      const sandbox = await this.provider.create({
        runId: run.runId,
        tenant: run.tenant,
        hostWorkspace,
        limits: run.spec.limits,
        labels: this.labelsFor(run),
        image,
        egress,
      });
      if ((run.state as RunState) === 'STOPPED')
        return void (await this.provider.remove(sandbox.id).catch(() => undefined)); // deleted meanwhile
      await this.connect(run, sandbox);
    } catch (err) {
      this.markFailed(run, `could not start the run: ${(err as Error).message}`);
      if (run.sandbox) await this.provider.remove(run.sandbox.id).catch(() => undefined);
      await this.egress.close(run.runId);
      // Its workspace is gone with it: it no longer holds disk.
      run.sandboxRemoved();
      if (err instanceof SandboxPreconditionError)
        throw new GatewayError(status.FAILED_PRECONDITION, `could not start the run: ${err.message}`);
    }
  }

  /**
   * What a tenant's runs hold against its quotas: memory, CPU and a slot while live (queued,
   * starting or ready); disk while the workspace exists (until DeleteRun, failed runs too).
   */
  reservedBy(tenant: string): Reserved {
    const held: Reserved = { liveRuns: 0, memoryMb: 0, cpuMillis: 0, diskMb: 0 };
    for (const r of this.runs.values()) {
      if (r.tenant !== tenant) continue;
      const live = r.state === 'STARTING' || r.state === 'READY';
      if (live) {
        held.liveRuns++;
        held.memoryMb += r.spec.limits.memoryMb;
        held.cpuMillis += r.spec.limits.cpuMillis;
      }
      if (live || (r.state === 'FAILED' && r.sandbox)) held.diskMb += r.spec.limits.diskMb ?? 0;
    }
    return held;
  }

  private labelsFor(run: RunRecord): Record<string, string> {
    return {
      ...run.spec.labels,
      [LABELS.managed]: 'true',
      [LABELS.instance]: this.config.instance,
      [LABELS.runId]: run.runId,
      [LABELS.tenant]: run.tenant,
      [LABELS.version]: VERSION,
      [LABELS.spec]: Buffer.from(JSON.stringify({ spec: run.spec, createdAt: run.createdAt.toISOString() })).toString(
        'base64',
      ),
    };
  }

  /** Talks to a sandbox's runner until it answers `initialize`, then watches it. */
  private async connect(run: RunRecord, sandbox: Sandbox): Promise<void> {
    const runner = new RunnerClient(sandbox);
    this.watch(run, sandbox, runner);
    const init = await runner.initialize(
      {
        runId: run.runId,
        conversationId: run.spec.conversationId,
        workspace: sandbox.workspacePath,
        features: run.spec.features,
        settings: this.config.runner,
      },
      this.config.runs.startTimeoutSeconds * 1000,
    );
    run.becomeReady(init.tools);
  }

  /** The run takes the sandbox and its runner: their end is the run's failure. */
  private watch(run: RunRecord, sandbox: Sandbox, runner: RunnerClient): void {
    run.attach(sandbox, runner);
    // The connection often notices a dead runner before the sandbox's exit is reported: the
    // run is FAILED from that moment, and the exit's reason (OOM, signal) replaces the
    // provisional one when it arrives.
    runner.onRunEvent(ResourcesEvent.type, (payload) => this.telemetry.runResources(run, payload));
    runner.onGone((err) => this.markFailed(run, `the runner stopped answering: ${err.message}`, true));
    void sandbox.exited.then((exit) => {
      const reason = exit.oomKilled
        ? `the run ran out of memory and its sandbox was killed (OOM)${exit.detail ? `: ${exit.detail}` : ''}`
        : `the run's sandbox ended: ${exit.reason}`;
      this.failed(run, reason, run.sandboxExited(reason));
    });
  }

  private markFailed(run: RunRecord, reason: string, provisional = false): void {
    this.failed(run, reason, run.fail(reason, provisional));
  }

  /** What follows a transition to FAILED: the log line, and the runner let go. */
  private failed(run: RunRecord, reason: string, left: { runner?: RunnerClient } | undefined): void {
    if (!left) return;
    logger.warn({ runId: run.runId, tenant: run.tenant, reason }, 'run failed');
    this.telemetry.runFailed(run, reason);
    left.runner?.dispose();
  }

  /** What each live run uses now; a run whose provider cannot say (or takes over 2 s) is left out. */
  private async usageByTenant(): Promise<RunUsage[]> {
    const live = [...this.runs.values()].filter((r) => r.live && r.sandbox?.usage);
    const read = await Promise.all(
      live.map((r) =>
        Promise.race([
          r.sandbox!.usage!(),
          new Promise<undefined>((res) => setTimeout(() => res(undefined), 2000).unref()),
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

  /** Another tenant's run is indistinguishable from one that does not exist. */
  get(tenant: string, runId: string): RunRecord {
    const run = this.runs.get(runId);
    if (!run || run.tenant !== tenant) throw notFound(`run ${runId} not found`);
    return run;
  }

  /** What the run uses now, as its provider measures it; undefined when it cannot say. */
  async usage(run: RunRecord): Promise<SandboxUsage | undefined> {
    if (!run.sandbox || run.state === 'STOPPED' || !this.provider.usage) return undefined;
    return this.provider.usage(run.sandbox.id).catch((err: Error) => {
      logger.debug({ runId: run.runId, err: err.message }, 'no usage');
      return undefined;
    });
  }

  list(tenant: string): RunRecord[] {
    return [...this.runs.values()].filter((r) => r.tenant === tenant);
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

  async delete(tenant: string, runId: string): Promise<void> {
    const run = this.get(tenant, runId);
    const before = run.state;
    await this.stopRun(run, '');
    this.runs.delete(runId);
    this.telemetry.runDeleted(run, before);
  }

  /** Stops a run for `why` (empty for a plain delete) and removes (or only stops) its sandbox. */
  private async stopRun(run: RunRecord, why: string, remove = true): Promise<void> {
    const left = run.stop(why);
    if (left.state !== 'STOPPED') this.telemetry.runStopped(run);
    if (left.state === 'STARTING' || left.state === 'READY') {
      await left.runner?.shutdown(1500);
      left.runner?.dispose();
    }
    if (run.sandbox) {
      if (remove) {
        await this.provider
          .remove(run.sandbox.id)
          .catch((err) => logger.warn({ runId: run.runId, err: err.message }, 'remove failed'));
        // A pooled sandbox serves one run: its claim goes with it, it never returns to the pool.
        if (run.start === 'pool') await this.claims.remove(run.sandbox.id).catch(() => undefined);
      } else await this.provider.stop(run.sandbox.id).catch(() => undefined);
    }
    await this.egress.close(run.runId);
    logger.info({ runId: run.runId, why: why || 'deleted' }, 'run stopped');
  }

  /** Finds runs that outlived a gateway restart, re-attaches live ones and removes orphans. */
  async recover(): Promise<{ recovered: number; removed: number }> {
    const selector = { [LABELS.managed]: 'true', [LABELS.instance]: this.config.instance };
    const found = await this.provider.list(selector);
    let recovered = 0;
    let removed = 0;
    for (const info of found) {
      const pooled = info.labels[LABELS.pool] !== undefined;
      // A pooled sandbox's run is in its claim record; without one it was idle.
      const claim = pooled ? await this.claims.read(info.id) : undefined;
      if (pooled && !claim) {
        if (info.running && (await this.readopt(info.id, info.labels[LABELS.pool]!))) continue;
        await this.provider.remove(info.id).catch(() => undefined);
        removed++;
        continue;
      }
      const runId = pooled ? claim?.runId : info.labels[LABELS.runId];
      const tenant = pooled ? claim?.tenant : info.labels[LABELS.tenant];
      let saved: { spec: RunSpec; createdAt: string } | undefined;
      try {
        saved = claim ?? JSON.parse(Buffer.from(info.labels[LABELS.spec] ?? '', 'base64').toString('utf8'));
      } catch {
        saved = undefined;
      }
      if (!info.running || !runId || !tenant || !saved || this.runs.has(runId)) {
        await this.provider.remove(info.id).catch(() => undefined);
        if (pooled) await this.claims.remove(info.id).catch(() => undefined);
        removed++;
        continue;
      }
      const run = new RunRecord(runId, tenant, saved.spec, new Date(saved.createdAt), pooled ? 'pool' : 'cold');
      this.runs.set(runId, run);
      try {
        if (saved.spec.egress) await this.egress.open(runId, tenant, saved.spec.egress);
        await this.connect(run, await this.provider.attach(info.id));
        recovered++;
      } catch (err) {
        logger.warn({ runId, err: (err as Error).message }, 'could not re-attach; removing');
        this.runs.delete(runId);
        run.runner?.dispose();
        await this.provider.remove(info.id).catch(() => undefined);
        await this.egress.close(runId);
        if (pooled) await this.claims.remove(info.id).catch(() => undefined);
        removed++;
      }
    }
    // Claims whose sandbox is gone (removed while the gateway was down).
    const ids = new Set(found.map((f) => f.id));
    for (const id of await this.claims.list()) if (!ids.has(id)) await this.claims.remove(id).catch(() => undefined);
    removed +=
      (await this.provider.sweep?.(selector).catch((err: Error) => {
        logger.warn({ err: err.message }, 'could not sweep leftovers');
        return 0;
      })) ?? 0;
    return { recovered, removed };
  }

  /**
   * An idle pooled sandbox an earlier gateway left: kept for the pool when the pool keeps its
   * class and its runner answers, bound to no run, and takes a fresh prepare. A runner that says
   * it has a run (its claim record lost) is never handed out again.
   */
  private async readopt(id: string, key: string): Promise<boolean> {
    // Default limits, of any image: the class itself is checked against the pool's (templates
    // included) when startPool adopts it.
    const { size, maxTotal, templates } = this.config.pool;
    const base = classKey(this.defaultLimits());
    const off = maxTotal <= 0 || (size <= 0 && !Object.values(templates).some((n) => n > 0));
    if (off || (key !== base && !key.startsWith(`${base}-i`))) return false;
    let runner: RunnerClient | undefined;
    try {
      const sandbox = await this.provider.attach(id);
      runner = new RunnerClient(sandbox);
      const { runId } = await runner.ping(ADOPT_TIMEOUT_MS);
      if (runId !== null) throw new Error(`its runner is bound to ${runId}`);
      await runner.prepare({ workspace: sandbox.workspacePath, settings: this.config.runner }, ADOPT_TIMEOUT_MS);
      this.adoptable.push({ key, warm: { sandbox, runner } });
      return true;
    } catch (err) {
      logger.warn({ sandbox: id, err: (err as Error).message }, 'idle pooled sandbox not reusable; removing');
      runner?.dispose();
      return false;
    }
  }

  /** Stops runs idle too long or alive past the maximum lifetime. */
  startSweeper(everyMs = 5000): void {
    this.sweeper = setInterval(() => void this.sweep(), everyMs);
    this.sweeper.unref();
    if (this.provider.shared) {
      this.discoverer = setInterval(() => void this.discover().catch(() => undefined), DISCOVER_EVERY_MS);
      this.discoverer.unref();
    }
  }

  /**
   * Where replicas share the runs (Kubernetes): takes up runs another replica created, and
   * forgets runs whose sandbox another replica removed. Unlike `recover`, it removes nothing.
   */
  async discover(): Promise<number> {
    if (this.discovering) return 0;
    this.discovering = true;
    try {
      const found = await this.provider.list({ [LABELS.managed]: 'true', [LABELS.instance]: this.config.instance });
      const ids = new Set(found.map((f) => f.id));
      // A run whose sandbox is gone stays (FAILED, with the reason) for a while, so that its
      // tenant can still learn why; then it is forgotten, as DeleteRun on another replica meant.
      const now = Date.now();
      for (const [runId, run] of this.runs) {
        if (!run.sandbox || run.state === 'STARTING' || ids.has(run.sandbox.id)) {
          this.goneSince.delete(runId);
          continue;
        }
        const since = this.goneSince.get(runId) ?? now;
        this.goneSince.set(runId, since);
        if (now - since < FORGET_GONE_AFTER_MS) continue;
        run.runner?.dispose();
        this.runs.delete(runId);
        this.goneSince.delete(runId);
      }
      let taken = 0;
      for (const info of found) {
        const runId = info.labels[LABELS.runId];
        const tenant = info.labels[LABELS.tenant];
        if (!info.running || !runId || !tenant || this.runs.has(runId) || info.labels[LABELS.pool] !== undefined)
          continue;
        let saved: { spec: RunSpec; createdAt: string };
        try {
          saved = JSON.parse(Buffer.from(info.labels[LABELS.spec] ?? '', 'base64').toString('utf8'));
        } catch {
          continue;
        }
        const run = new RunRecord(runId, tenant, saved.spec, new Date(saved.createdAt), 'cold');
        this.runs.set(runId, run);
        try {
          await this.connect(run, await this.provider.attach(info.id));
          taken++;
        } catch (err) {
          // Not ours to remove: the replica that created it (or its pod's end) decides.
          logger.debug({ runId, err: (err as Error).message }, 'could not take up a run yet');
          run.runner?.dispose();
          this.runs.delete(runId);
        }
      }
      return taken;
    } finally {
      this.discovering = false;
    }
  }

  async sweep(now = Date.now()): Promise<void> {
    const { idleTimeoutSeconds, maxLifetimeSeconds } = this.config.runs;
    for (const run of this.runs.values()) {
      const ready = run.ready();
      if (!ready) continue;
      if (maxLifetimeSeconds > 0 && now - run.createdAt.getTime() > maxLifetimeSeconds * 1000) {
        await this.stopRun(run, `stopped: reached the maximum lifetime of ${maxLifetimeSeconds}s`);
      } else if (
        // A replica sees only the calls made through it: idleness is not its to judge alone.
        !this.provider.shared &&
        idleTimeoutSeconds > 0 &&
        !ready.runner.busy &&
        now - ready.runner.lastActivity > idleTimeoutSeconds * 1000
      ) {
        await this.stopRun(run, `stopped: idle for more than ${idleTimeoutSeconds}s`);
      }
    }
  }

  /** Graceful shutdown: stops every run (or leaves them running for the next gateway). */
  async close(keep: boolean): Promise<void> {
    if (this.sweeper) clearInterval(this.sweeper);
    if (this.discoverer) clearInterval(this.discoverer);
    this.tenancy.flushRefusals();
    // Kept runs keep the idle pool beside them for the next gateway to adopt; otherwise it goes.
    const leftIdle = this.adoptable.splice(0);
    if (keep) {
      await this.pool?.release();
      for (const { warm } of leftIdle) warm.runner.dispose();
    } else {
      await this.pool?.close();
      for (const { warm } of leftIdle) {
        warm.runner.dispose();
        await this.provider.remove(warm.sandbox.id).catch(() => undefined);
      }
    }
    if (keep) {
      for (const run of this.runs.values()) run.runner?.dispose();
    } else {
      await Promise.all(
        [...this.runs.values()].map((r) => (r.state === 'STOPPED' ? undefined : this.stopRun(r, 'gateway shutdown'))),
      );
    }
    this.runs.clear();
    await this.egress.closeAll(keep);
    await this.provider.close();
  }
}
