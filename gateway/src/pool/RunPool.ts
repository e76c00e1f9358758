import type { GatewayConfig, ResourceLimits } from '../config';
import { logger } from '../log';
import { RunnerClient } from '../runs/RunnerClient';
import { defaultLimits } from '../runs/specChecks';
import type { Sandbox, SandboxProvider } from '../sandbox/provider';
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
    // Claims are kept in this replica's state directory, which replicas sharing runs do not share.
    if (provider.capabilities.sharedState) return;
    const targets = [{ limits: defaultLimits(config), size }, ...(await this.templateTargets())];
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

  /** A prepared sandbox of exactly these limits and image, if one is idle. */
  claim(limits: ResourceLimits, image: string | undefined): Warm | undefined {
    return this.warm?.claim(limits, image);
  }

  stats(): PoolClassStats[] {
    return this.warm?.stats().classes ?? [];
  }

  /**
   * On gateway shutdown. Kept runs keep the idle pool beside them for the next gateway to
   * adopt; otherwise it goes.
   */
  async close(keep: boolean): Promise<void> {
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
