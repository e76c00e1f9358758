import { defaultLimits, type GatewayConfig, type ResourceLimits } from '../config';
import { logger } from '../log';
import { RunnerClient } from '../runs/RunnerClient';
import { LABELS, type Sandbox, type SandboxProvider } from '../sandbox/provider';
import type { TemplateCatalog } from '../templates/catalog';
import type { Tenancy } from '../tenancy/Tenancy';
import { classKey, type PoolClassStats, type PoolTarget, type Warm, WarmPool } from './WarmPool';

/** The admission queue's name for pool refills: no tenant can be called this. */
const POOL_LINE = '\0pool';

export interface RunPoolDeps {
  config: GatewayConfig;
  provider: SandboxProvider;
  tenancy: Tenancy;
  templates: Pick<TemplateCatalog, 'imageOf'>;
}

/**
 * The warm pool as the runs see it: which classes it keeps (the default limits, of the runner
 * image and of the templates `pool.templates` names), started after recovery with what an
 * earlier gateway left idle, and claimed from by CreateRun.
 */
export class RunPool {
  /** Started sandboxes waiting for runs; undefined until `start` (and when the pool is off). */
  warm?: WarmPool;
  /** The classes of the pool the provider shares among replicas, when it does. */
  private shared?: { classes: (PoolTarget & { key: string })[] };
  /** Idle pooled sandboxes an earlier gateway left, checked by recovery, for `start` to adopt. */
  private adoptable: { key: string; warm: Warm }[] = [];

  constructor(private readonly deps: RunPoolDeps) {}

  /**
   * Whether an idle pooled sandbox of class `key` may be kept: the pool is on and the class has
   * the default limits, of any image. The class itself is checked against the pool's (templates
   * included) when `start` adopts it.
   */
  mayAdopt(key: string): boolean {
    const { size, maxTotal, templates } = this.deps.config.pool;
    const base = classKey(defaultLimits(this.deps.config));
    const off = maxTotal <= 0 || (size <= 0 && !Object.values(templates).some((n) => n > 0));
    return !off && (key === base || key.startsWith(`${base}-i`));
  }

  /** Keeps an idle pooled sandbox found on start-up (its runner prepared afresh) for `start`. */
  leftIdle(key: string, warm: Warm): void {
    this.adoptable.push({ key, warm });
  }

  /** Starts keeping warm sandboxes (after recovery). */
  async start(): Promise<void> {
    const { config, provider, tenancy } = this.deps;
    const { size, maxTotal, maxMemoryMb, concurrency } = config.pool;
    if (provider.capabilities.pool === 'none') return;
    const targets = [{ limits: defaultLimits(config), size }, ...(await this.templateTargets())];
    if (provider.capabilities.pool === 'shared') return this.startShared(targets);
    if (maxTotal > 0 && targets.some((t) => t.size > 0) && !this.warm) {
      this.warm = new WarmPool({
        provider,
        instance: config.instance,
        targets,
        maxTotal,
        maxMemoryMb,
        concurrency,
        prepare: (sandbox) => this.prepare(sandbox),
        admit: (start) => tenancy.admission.submit(POOL_LINE, Number.MAX_SAFE_INTEGER, start),
      });
    }
    // What an earlier gateway left idle fills the pool first; what does not fit is removed.
    for (const { key, warm } of this.adoptable.splice(0)) {
      if (this.warm?.adopt(key, warm)) continue;
      warm.runner.dispose();
      void provider.remove(warm.sandbox.id).catch(() => undefined);
    }
    this.warm?.start();
  }

  /**
   * Keeps the pool the provider's backend holds for every replica: this replica fills it when
   * its turn comes, and holds a connection to each idle sandbox's runner so that a claim needs
   * no new one.
   */
  private async startShared(targets: PoolTarget[]): Promise<void> {
    const { config, provider } = this.deps;
    const shared = provider.sharedPool;
    if (!shared) throw new Error(`the ${provider.name} provider declares a shared pool but has none`);
    const classes = new Map<string, PoolTarget & { key: string }>();
    for (const t of targets) {
      if (t.size <= 0) continue;
      const key = classKey(t.limits, t.image);
      const c = classes.get(key);
      if (c) c.size += t.size;
      else classes.set(key, { ...t, key });
    }
    this.shared = { classes: [...classes.values()] };
    const settings = { settings: config.runner };
    await shared.start<RunnerClient>({
      classes: [...classes.values()],
      maxTotal: config.pool.maxTotal,
      maxMemoryMb: config.pool.maxMemoryMb,
      concurrency: config.pool.concurrency,
      labels: { [LABELS.managed]: 'true', [LABELS.instance]: config.instance },
      prepare: async (sandbox) => (await this.prepare(sandbox)).dispose(),
      link: async (sandbox) => {
        const runner = new RunnerClient(sandbox);
        runner.preparedElsewhere({ workspace: sandbox.workspacePath, ...settings });
        try {
          const { runId } = await runner.ping(config.runs.startTimeoutSeconds * 1000);
          if (runId !== null) throw new Error(`its runner is bound to ${runId}`);
          return runner;
        } catch (err) {
          runner.dispose();
          throw err;
        }
      },
      unlink: (runner) => runner.dispose(),
    });
  }

  /** Whether claims are made in a pool shared by every replica (asynchronous: an API call). */
  get isShared(): boolean {
    return this.shared !== undefined;
  }

  /** A prepared sandbox of exactly these limits and image, if one is idle in this gateway's pool. */
  claim(limits: ResourceLimits, image: string | undefined): Warm | undefined {
    return this.warm?.claim(limits, image);
  }

  /**
   * A sandbox of the shared pool, made the run's by an atomic claim there (`run.labels` say
   * whose, as a cold sandbox's would), with this replica's open connection to its runner.
   */
  async claimShared(
    limits: ResourceLimits,
    image: string | undefined,
    run: { runId: string; tenant: string; labels: Record<string, string> },
  ): Promise<Warm | undefined> {
    const shared = this.deps.provider.sharedPool;
    if (!this.shared || !shared) return undefined;
    const claimed = await shared.claim<RunnerClient>(classKey(limits, image), run);
    return claimed ? { sandbox: claimed.sandbox, runner: claimed.link, recorded: true } : undefined;
  }

  stats(): PoolClassStats[] {
    if (this.shared) {
      const counts = new Map((this.deps.provider.sharedPool?.stats() ?? []).map((c) => [c.key, c]));
      return this.shared.classes.map((c) => ({
        key: c.key,
        limits: c.limits,
        ...(c.image ? { image: c.image } : {}),
        target: c.size,
        idle: counts.get(c.key)?.idle ?? 0,
        starting: counts.get(c.key)?.starting ?? 0,
      }));
    }
    return this.warm?.stats().classes ?? [];
  }

  /**
   * On gateway shutdown. Kept runs keep the idle pool beside them for the next gateway to
   * adopt; otherwise it goes.
   */
  async close(keep: boolean): Promise<void> {
    // The shared pool is every replica's: it stays as it is (the provider lets go of its links).
    if (this.shared) return;
    const leftIdle = this.adoptable.splice(0);
    if (keep) {
      await this.warm?.release();
      for (const { warm } of leftIdle) warm.runner.dispose();
    } else {
      await this.warm?.close();
      for (const { warm } of leftIdle) {
        warm.runner.dispose();
        await this.deps.provider.remove(warm.sandbox.id).catch(() => undefined);
      }
    }
  }

  /** Pool classes of templates: one a template not (yet) built on this runner image is left out, with a warning. */
  private async templateTargets(): Promise<PoolTarget[]> {
    const out = [];
    for (const [name, size] of Object.entries(this.deps.config.pool.templates)) {
      if (size <= 0) continue;
      try {
        const image = await this.deps.templates.imageOf(name);
        out.push({ limits: defaultLimits(this.deps.config), image, size });
      } catch (err) {
        logger.warn({ template: name, err: (err as Error).message }, 'template not pooled');
      }
    }
    return out;
  }

  /** Opens a pooled sandbox's runner connection and readies it for any run. */
  private async prepare(sandbox: Sandbox): Promise<RunnerClient> {
    const { config } = this.deps;
    const runner = new RunnerClient(sandbox);
    try {
      await runner.prepare(
        { workspace: sandbox.workspacePath, settings: config.runner },
        config.runs.startTimeoutSeconds * 1000,
      );
      return runner;
    } catch (err) {
      runner.dispose();
      throw err;
    }
  }
}
