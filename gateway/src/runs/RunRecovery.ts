import type { GatewayConfig } from '../config';
import type { EgressService } from '../egress/service';
import { logger } from '../log';
import type { ClaimStore } from '../pool/ClaimStore';
import type { RunPool } from '../pool/RunPool';
import {
  LABELS,
  type Sandbox,
  type SandboxChange,
  type SandboxInfo,
  SandboxUnreachableError,
  type SandboxProvider,
} from '../sandbox/provider';
import type { RunLifecycle } from './RunLifecycle';
import { type PausedRecord, PausedStore } from './PausedStore';
import { RunnerClient } from './RunnerClient';
import { RunRecord, type RunSpec } from './RunRecord';
import type { RunRegistry } from './RunRegistry';

/** How long an idle pooled sandbox found on start-up may take to show it is healthy. */
const ADOPT_TIMEOUT_MS = 5000;
const FORGET_GONE_AFTER_MS = 5 * 60_000;
const FORGET_CHECK_MS = 10_000;
/** Beyond the start timeout, before a claimed sandbox left unbound is taken for its claimer's death. */
const CLAIM_GRACE_MS = 5000;
/** How soon a claimed sandbox found still unbound is looked at again: at first, then doubling up to the most. */
const CLAIM_RECHECK_MS = 250;
const CLAIM_RECHECK_MAX_MS = 4000;

export interface RunRecoveryDeps {
  config: GatewayConfig;
  provider: SandboxProvider;
  registry: RunRegistry;
  /** Re-attaches a found run's runner, as a cold start connects one. */
  lifecycle: Pick<RunLifecycle, 'connect'>;
  egress: EgressService;
  claims: ClaimStore;
  paused: PausedStore;
  pool: RunPool;
}

/**
 * The runs that exist without this gateway having created them: those that outlived a restart
 * (and the idle pooled sandboxes beside them), and, where replicas share the runs, those
 * another replica created or removed.
 */
export class RunRecovery {
  private forgetter?: NodeJS.Timeout;
  /** Sandboxes being taken up now. */
  private readonly takingUp = new Set<string>();
  /** Claimed pooled sandboxes to look at again, by sandbox id. */
  private readonly retries = new Map<string, NodeJS.Timeout>();
  /** Claimed sandboxes found unbound, by id: how often so far (each check is a connection to the runner). */
  private readonly unboundChecks = new Map<string, number>();
  /** Runs whose sandbox another replica (or the cluster) removed, and since when. */
  private readonly goneSince = new Map<string, number>();
  /** Sandboxes of runs paused here that another replica's resume made, by id: since when. */
  private readonly resumesSeen = new Map<string, number>();

  constructor(private readonly deps: RunRecoveryDeps) {}

  private get selector(): Record<string, string> {
    return { [LABELS.managed]: 'true', [LABELS.instance]: this.deps.config.instance };
  }

  /** Finds runs that outlived a gateway restart, re-attaches live ones and removes orphans. */
  async recover(): Promise<{ recovered: number; removed: number; left: number; paused: number }> {
    const { provider, registry, lifecycle, egress, claims } = this.deps;
    const selector = this.selector;
    const found = await provider.list(selector);
    const paused = await this.pausedRecords();
    let recovered = 0;
    let removed = 0;
    let left = 0;
    for (const info of found) {
      const pooled = info.labels[LABELS.pool] !== undefined;
      // An idle sandbox of a pool every replica shares is the pool's, not this gateway's to adopt.
      if (pooled && provider.capabilities.pool === 'shared') continue;
      // A pooled sandbox's run is in its claim record; without one it was idle.
      const claim = pooled ? await claims.read(info.id) : undefined;
      const pausedRun = paused.get((pooled ? claim?.runId : info.labels[LABELS.runId]) ?? '');
      // Where replicas share the records, another replica may be pausing or resuming it now:
      // the watch decides (`resumeSeen`), not this start.
      if (pausedRun && this.deps.paused.shared) continue;
      if (pausedRun) {
        const checkpoint = pausedRun.pause.checkpoint;
        if (checkpoint?.name && checkpoint.sandbox === info.id) {
          // A memory pause whose checkpoint was written whole: the stopped sandbox is the pause.
          // One running was being resumed: it is stopped, and the next resume restores the
          // checkpoint again rather than trust a runner nobody saw come back.
          if (info.running)
            await provider
              .stop(info.id)
              .catch((err: Error) =>
                logger.warn({ runId: pausedRun.runId, err: err.message }, 'could not stop a resume'),
              );
          continue;
        }
        // A pause (or a resume) the gateway did not see finish: the record decides, and the
        // pause is completed. A runner it never saw finish restoring is not trusted.
        await provider
          .park?.(info.id)
          .catch((err: Error) =>
            logger.warn({ runId: pausedRun.runId, err: err.message }, 'could not complete a pause'),
          );
        if (pooled) await claims.remove(info.id).catch(() => undefined);
        continue;
      }
      if (pooled && !claim) {
        if (info.running && (await this.readopt(info.id, info.labels[LABELS.pool]!))) continue;
        await provider.remove(info.id).catch(() => undefined);
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
      if (!info.running || !runId || !tenant || !saved || registry.has(runId)) {
        await provider.remove(info.id).catch(() => undefined);
        if (pooled) await claims.remove(info.id).catch(() => undefined);
        removed++;
        continue;
      }
      const run = new RunRecord(runId, tenant, saved.spec, new Date(saved.createdAt), pooled ? 'pool' : 'cold');
      registry.add(run);
      try {
        if (saved.spec.egress) await egress.open(runId, tenant, saved.spec.egress);
        await lifecycle.connect(run, await provider.attach(info.id));
        recovered++;
      } catch (err) {
        registry.remove(runId);
        run.runner?.dispose();
        if (err instanceof SandboxUnreachableError) {
          // A configuration this gateway lacks, not a dead run: its data stays where it is.
          logger.error({ runId, err: err.message }, 'cannot reach a live run; left in place');
          await egress.close(runId);
          left++;
          continue;
        }
        logger.warn({ runId, err: (err as Error).message }, 'could not re-attach; removing');
        await provider.remove(info.id).catch(() => undefined);
        await egress.close(runId);
        if (pooled) await claims.remove(info.id).catch(() => undefined);
        removed++;
      }
    }
    const ids = new Set(found.map((f) => f.id));
    for (const record of paused.values()) {
      const checkpoint = record.pause.checkpoint;
      if (checkpoint && !(checkpoint.name && ids.has(checkpoint.sandbox)))
        await this.memoryLost(
          record,
          checkpoint.name
            ? 'its sandbox, which held the checkpoint, is gone'
            : 'the gateway stopped while its checkpoint was being written',
        );
      registry.add(pausedRun(record));
    }
    // Claims whose sandbox is gone (removed while the gateway was down).
    for (const id of await claims.list()) if (!ids.has(id)) await claims.remove(id).catch(() => undefined);
    const kept = new Set([...paused.values()].map((r) => r.workspace));
    removed +=
      (await provider.sweep?.(selector, kept).catch((err: Error) => {
        logger.warn({ err: err.message }, 'could not sweep leftovers');
        return 0;
      })) ?? 0;
    return { recovered, removed, left, paused: paused.size };
  }

  /**
   * A memory pause whose checkpoint cannot be trusted (never seen written whole) or is gone:
   * never restored. The run stays paused on its workspace, at portable depth, and says what it lost.
   */
  private async memoryLost(record: PausedRecord, why: string): Promise<void> {
    record.pause = {
      ...record.pause,
      depth: 'portable',
      checkpoint: undefined,
      notKept: [
        ...record.pause.notKept,
        `the run's memory (kernels' variables, language servers, workers): ${why}, so it is not restored; the files of the workspace are kept`,
      ],
    };
    await this.deps.paused
      .write(record.runId, record, { durable: true })
      .catch((err: Error) =>
        logger.warn({ runId: record.runId, err: err.message }, 'could not rewrite a paused record'),
      );
    logger.warn(
      { runId: record.runId, why },
      'a memory checkpoint is not restored; the run stays paused at portable depth',
    );
  }

  /** The paused runs' records, by run id. */
  private async pausedRecords(): Promise<Map<string, PausedRecord>> {
    const { paused } = this.deps;
    const records = new Map<string, PausedRecord>();
    for (const id of await paused.list()) {
      const record = await paused.read(id);
      if (record) records.set(record.runId, record);
      else logger.error({ file: id }, 'a paused run record that cannot be read is left as it is');
    }
    return records;
  }

  /**
   * An idle pooled sandbox an earlier gateway left: kept for the pool when the pool keeps its
   * class and its runner answers, bound to no run, and takes a fresh prepare. A runner that says
   * it has a run (its claim record lost) is never handed out again.
   */
  private async readopt(id: string, key: string): Promise<boolean> {
    const { config, provider, pool } = this.deps;
    if (!pool.mayAdopt(key)) return false;
    let runner: RunnerClient | undefined;
    try {
      const sandbox = await provider.attach(id);
      runner = new RunnerClient(sandbox);
      const { runId } = await runner.ping(ADOPT_TIMEOUT_MS);
      if (runId !== null) throw new Error(`its runner is bound to ${runId}`);
      await runner.prepare({ workspace: sandbox.workspacePath, settings: config.runner }, ADOPT_TIMEOUT_MS);
      pool.leftIdle(key, { sandbox, runner });
      return true;
    } catch (err) {
      logger.warn({ sandbox: id, err: (err as Error).message }, 'idle pooled sandbox not reusable; removing');
      runner?.dispose();
      return false;
    }
  }

  /**
   * Where the provider's sandboxes are shared with other replicas: from now on, takes up runs
   * they create (or claim from the shared pool) as its watch reports them, and forgets runs
   * whose sandbox they removed. Unlike `recover`, it removes nothing of theirs. Every `everyMs`
   * it forgets runs gone long enough and, where paused records are shared, agrees with them.
   */
  async startDiscovery(everyMs = FORGET_CHECK_MS): Promise<void> {
    const { provider } = this.deps;
    if (!provider.capabilities.sharedState) return;
    if (!provider.watch) throw new Error(`the ${provider.name} provider shares its sandboxes but cannot watch them`);
    await provider.watch((c) => this.changed(c));
    this.forgetter = setInterval(() => {
      this.forgetGone();
      if (this.deps.paused.shared) void this.reconcilePaused();
    }, everyMs);
    this.forgetter.unref();
  }

  stopDiscovery(): void {
    if (this.forgetter) clearInterval(this.forgetter);
    for (const t of this.retries.values()) clearTimeout(t);
    this.retries.clear();
  }

  private changed({ change, info }: SandboxChange): void {
    if (change === 'removed' || !info.running) {
      this.gone(info.id);
      return;
    }
    // An idle pooled sandbox is no run (the pool looks after it); a claimed one carries its run's labels.
    if (info.labels[LABELS.pool] !== undefined) return;
    const runId = info.labels[LABELS.runId];
    if (!runId || this.takingUp.has(info.id)) return;
    const known = this.deps.registry.find(runId);
    if (known) {
      // Known here as paused: a sandbox for it is another replica's resume.
      if (this.deps.paused.shared && known.state === 'PAUSED') void this.resumeSeen(info);
      return;
    }
    if (info.ready) return void this.takeUp(info);
    // Still being started by another replica, or left unbooted by one that died while starting it.
    if (info.giveUpAt === undefined) return;
    const left = info.giveUpAt - Date.now();
    if (left > 0) {
      this.lookAgain(info.id, left);
      return;
    }
    logger.warn(
      { runId, sandbox: info.id },
      'a run sandbox never booted (its replica died while starting it): removing it',
    );
    void this.deps.provider.remove(info.id).catch(() => undefined);
  }

  /** Looks at a sandbox again after `ms` (once: a later call while one is pending does nothing). */
  private lookAgain(id: string, ms: number): void {
    if (this.retries.has(id)) return;
    const retry = setTimeout(() => {
      this.retries.delete(id);
      const { provider, config } = this.deps;
      void provider
        .list({ [LABELS.managed]: 'true', [LABELS.instance]: config.instance })
        .then((all) => {
          const now = all.find((i) => i.id === id);
          if (now) this.changed({ change: 'changed', info: now });
        })
        .catch(() => undefined);
    }, ms + 100);
    retry.unref();
    this.retries.set(id, retry);
  }

  /**
   * A run another replica made: registered at once (STARTING, so GetRun finds it), connected
   * to and initialized. A sandbox claimed from the shared pool whose runner is still unbound
   * past the start timeout was claimed by a replica that died before it answered CreateRun:
   * nobody knows that run, and it is removed.
   */
  private async takeUp(info: SandboxInfo): Promise<void> {
    const { provider, registry, lifecycle, egress } = this.deps;
    const runId = info.labels[LABELS.runId]!;
    const tenant = info.labels[LABELS.tenant];
    let saved: { spec: RunSpec; createdAt: string };
    try {
      saved = JSON.parse(Buffer.from(info.labels[LABELS.spec] ?? '', 'base64').toString('utf8'));
    } catch {
      return;
    }
    if (!tenant || !saved?.spec) return;
    this.takingUp.add(info.id);
    const run = new RunRecord(runId, tenant, saved.spec, new Date(saved.createdAt), info.claimedAt ? 'pool' : 'cold');
    try {
      const sandbox = await provider.attach(info.id);
      if (info.claimedAt && (await this.unanswered(sandbox, info.claimedAt))) return;
      const before = this.deps.registry.find(runId);
      if (before && before.state !== 'PAUSED') return;
      if (before) {
        // Resumed by another replica: the pause it ended is still this run's last.
        run.pause = before.pause;
        registry.remove(runId);
      }
      registry.add(run);
      // This replica's own proxy of the run: the sandbox carries its egress to every replica that holds it.
      if (saved.spec.egress) await egress.open(runId, tenant, saved.spec.egress);
      await lifecycle.connect(run, sandbox);
    } catch (err) {
      // Not ours to remove: the replica that created it (or its pod's end) decides.
      logger.debug({ runId, err: (err as Error).message }, 'could not take up a run yet');
      run.runner?.dispose();
      if (registry.all().includes(run)) {
        registry.remove(runId);
        await egress.close(runId);
      }
    } finally {
      this.takingUp.delete(info.id);
    }
  }

  /**
   * Whether a claimed pooled sandbox's CreateRun can never have been answered: its runner is
   * unbound although the claim is older than the start timeout (the claimer binds before it
   * answers, and gives up at that timeout). Such a sandbox is removed; one younger is looked at
   * again once it is that old.
   */
  private async unanswered(sandbox: Sandbox, claimedAt: number): Promise<boolean> {
    const { provider, config } = this.deps;
    const limit = config.runs.startTimeoutSeconds * 1000 + CLAIM_GRACE_MS;
    const probe = new RunnerClient(sandbox);
    let bound: string | null;
    try {
      bound = (await probe.ping(config.runs.startTimeoutSeconds * 1000)).runId;
    } finally {
      probe.dispose();
    }
    const checks = (this.unboundChecks.get(sandbox.id) ?? 0) + 1;
    if (bound !== null) {
      this.unboundChecks.delete(sandbox.id);
      return false;
    }
    const age = Date.now() - claimedAt;
    if (age >= limit) {
      this.unboundChecks.delete(sandbox.id);
      logger.warn({ sandbox: sandbox.id }, 'a claimed pooled sandbox was never bound (its claimer died): removing it');
      await provider.remove(sandbox.id).catch(() => undefined);
      return true;
    }
    // The claimer may still be binding it (its bind and this ping race): looked at again soon,
    // so the run is known here shortly after its claim, and removed once the claim is past its time.
    provider.forget?.(sandbox.id);
    // Often at first (a bind takes tens of ms), then less: every check opens a stream into the pod.
    this.unboundChecks.set(sandbox.id, checks);
    const wait = Math.min(CLAIM_RECHECK_MS * 2 ** (checks - 1), CLAIM_RECHECK_MAX_MS);
    this.lookAgain(sandbox.id, Math.min(limit - age, wait));
    return true;
  }

  /**
   * A sandbox gone: a run being taken up is dropped, a known one is remembered FAILED for a
   * while, unless another replica paused it (its record says so): then it is PAUSED here too.
   */
  private gone(id: string): void {
    this.unboundChecks.delete(id);
    this.resumesSeen.delete(id);
    for (const run of this.deps.registry.all()) {
      if (run.sandbox?.id !== id) continue;
      if (!this.goneSince.has(run.runId)) this.goneSince.set(run.runId, Date.now());
      // A pause this replica makes is its own to finish.
      if (this.deps.paused.shared && run.state !== 'PAUSING') void this.pausedElsewhere(run);
    }
  }

  /**
   * A sandbox of a run paused here, made by another replica's resume: taken up once that resume
   * is done (it removes the record only then, so the run is never taken up half-restored). One
   * whose record outlives twice the start timeout was left by a replica that died resuming it:
   * the pause is completed (the sandbox removed, the workspace kept), and the next call resumes it.
   */
  private async resumeSeen(info: SandboxInfo): Promise<void> {
    const { paused, provider, config } = this.deps;
    const runId = info.labels[LABELS.runId]!;
    const first = this.resumesSeen.get(info.id) ?? Date.now();
    this.resumesSeen.set(info.id, first);
    let record: PausedRecord | undefined;
    try {
      record = await paused.read(runId);
    } catch {
      this.lookAgain(info.id, CLAIM_RECHECK_MAX_MS);
      return;
    }
    if (!record) {
      this.resumesSeen.delete(info.id);
      if (info.ready) await this.takeUp(info);
      else this.lookAgain(info.id, CLAIM_RECHECK_MS);
      return;
    }
    const limit = 2 * config.runs.startTimeoutSeconds * 1000 + CLAIM_GRACE_MS;
    if (Date.now() - first < limit) {
      this.lookAgain(info.id, CLAIM_RECHECK_MS * 4);
      return;
    }
    this.resumesSeen.delete(info.id);
    logger.warn({ runId, sandbox: info.id }, 'a resume never finished (its replica died): completing the pause');
    await provider.park?.(info.id).catch((err: Error) => logger.warn({ runId, err: err.message }, 'could not park'));
  }

  /** A run another replica paused: the record it wrote replaces what this replica knew of it. */
  private async pausedElsewhere(run: RunRecord): Promise<void> {
    const record = await this.deps.paused.read(run.runId).catch(() => undefined);
    // Only the run as it was when its sandbox went: a resume since then is newer news.
    if (!record || this.deps.registry.find(run.runId) !== run || run.state === 'PAUSING' || run.state === 'PAUSED')
      return;
    this.replace(run, pausedRun(record));
  }

  private replace(before: RunRecord, after: RunRecord): void {
    const { registry, egress } = this.deps;
    before.runner?.dispose();
    registry.remove(before.runId);
    this.goneSince.delete(before.runId);
    void egress.close(before.runId);
    registry.add(after);
  }

  /**
   * Where replicas share paused records: this replica's picture of paused runs made to agree
   * with them. A run paused here whose record is gone was deleted (or resumed) by another
   * replica and is forgotten (a resume's sandbox is taken up by the watch); a record of a run
   * this replica does not know is a run paused by another, listed here from now on.
   */
  private async reconcilePaused(): Promise<void> {
    const { paused, registry } = this.deps;
    let ids: Set<string>;
    try {
      ids = new Set(await paused.list());
    } catch (err) {
      logger.debug({ err: (err as Error).message }, 'could not list paused records');
      return;
    }
    for (const run of registry.all())
      if (run.state === 'PAUSED' && !ids.has(run.runId)) {
        // Read again: a resume here may have just removed it, or another may have written it.
        if (await paused.read(run.runId).catch(() => true)) continue;
        if (this.deps.registry.find(run.runId) === run && run.state === 'PAUSED') registry.remove(run.runId);
      }
    for (const id of ids) {
      if (registry.has(id)) continue;
      const record = await paused.read(id).catch(() => undefined);
      if (record && !registry.has(id)) registry.add(pausedRun(record));
    }
  }

  /**
   * Runs whose sandbox is gone stay (FAILED, with the reason) for a while, so that their tenant
   * can still learn why; then they are forgotten, as DeleteRun on another replica meant.
   */
  private forgetGone(now = Date.now()): void {
    const { registry } = this.deps;
    for (const [runId, since] of this.goneSince) {
      if (now - since < FORGET_GONE_AFTER_MS) continue;
      this.goneSince.delete(runId);
      const run = registry.find(runId);
      if (!run || run.state === 'PAUSED') continue;
      run.runner?.dispose();
      registry.remove(runId);
      void this.deps.egress.close(runId);
    }
  }
}

/** A paused run as its record describes it. */
function pausedRun(record: PausedRecord): RunRecord {
  const run = new RunRecord(record.runId, record.tenant, record.spec, new Date(record.createdAt), record.start);
  run.paused(record.workspace, PausedStore.pauseOf(record));
  return run;
}
