import type { GatewayConfig } from '../config';
import type { EgressService } from '../egress/service';
import { logger } from '../log';
import type { ClaimStore } from '../pool/ClaimStore';
import type { RunPool } from '../pool/RunPool';
import { LABELS, SandboxUnreachableError, type SandboxProvider } from '../sandbox/provider';
import type { RunLifecycle } from './RunLifecycle';
import { type PausedRecord, PausedStore } from './PausedStore';
import { RunnerClient } from './RunnerClient';
import { RunRecord, type RunSpec } from './RunRecord';
import type { RunRegistry } from './RunRegistry';

/** How long an idle pooled sandbox found on start-up may take to show it is healthy. */
const ADOPT_TIMEOUT_MS = 5000;
/** How often a replica sharing its runs with others looks for runs they created. */
const DISCOVER_EVERY_MS = 2000;
const FORGET_GONE_AFTER_MS = 5 * 60_000;

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
  private discoverer?: NodeJS.Timeout;
  private discovering = false;
  /** Runs whose sandbox another replica (or the cluster) removed, and since when. */
  private readonly goneSince = new Map<string, number>();

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
      // A pooled sandbox's run is in its claim record; without one it was idle.
      const claim = pooled ? await claims.read(info.id) : undefined;
      const pausedRun = paused.get((pooled ? claim?.runId : info.labels[LABELS.runId]) ?? '');
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
      const run = new RunRecord(record.runId, record.tenant, record.spec, new Date(record.createdAt), record.start);
      run.paused(record.workspace, PausedStore.pauseOf(record));
      registry.add(run);
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

  /** Where the provider's sandboxes are shared with other replicas: discovers their runs from now on. */
  startDiscovery(): void {
    if (!this.deps.provider.capabilities.sharedState) return;
    this.discoverer = setInterval(() => void this.discover().catch(() => undefined), DISCOVER_EVERY_MS);
    this.discoverer.unref();
  }

  stopDiscovery(): void {
    if (this.discoverer) clearInterval(this.discoverer);
  }

  /**
   * Where replicas share the runs (Kubernetes): takes up runs another replica created, and
   * forgets runs whose sandbox another replica removed. Unlike `recover`, it removes nothing.
   */
  async discover(): Promise<number> {
    if (this.discovering) return 0;
    this.discovering = true;
    try {
      const { provider, registry, lifecycle } = this.deps;
      const found = await provider.list(this.selector);
      const ids = new Set(found.map((f) => f.id));
      // A run whose sandbox is gone stays (FAILED, with the reason) for a while, so that its
      // tenant can still learn why; then it is forgotten, as DeleteRun on another replica meant.
      const now = Date.now();
      for (const run of registry.all()) {
        const { runId } = run;
        if (!run.sandbox || run.state === 'STARTING' || ids.has(run.sandbox.id)) {
          this.goneSince.delete(runId);
          continue;
        }
        const since = this.goneSince.get(runId) ?? now;
        this.goneSince.set(runId, since);
        if (now - since < FORGET_GONE_AFTER_MS) continue;
        run.runner?.dispose();
        registry.remove(runId);
        this.goneSince.delete(runId);
      }
      let taken = 0;
      for (const info of found) {
        const runId = info.labels[LABELS.runId];
        const tenant = info.labels[LABELS.tenant];
        if (!info.running || !runId || !tenant || registry.has(runId) || info.labels[LABELS.pool] !== undefined)
          continue;
        let saved: { spec: RunSpec; createdAt: string };
        try {
          saved = JSON.parse(Buffer.from(info.labels[LABELS.spec] ?? '', 'base64').toString('utf8'));
        } catch {
          continue;
        }
        const run = new RunRecord(runId, tenant, saved.spec, new Date(saved.createdAt), 'cold');
        registry.add(run);
        try {
          await lifecycle.connect(run, await provider.attach(info.id));
          taken++;
        } catch (err) {
          // Not ours to remove: the replica that created it (or its pod's end) decides.
          logger.debug({ runId, err: (err as Error).message }, 'could not take up a run yet');
          run.runner?.dispose();
          registry.remove(runId);
        }
      }
      return taken;
    } finally {
      this.discovering = false;
    }
  }
}
