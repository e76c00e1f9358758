import { createHash, randomUUID } from 'node:crypto';
import type { ResourceLimits } from '../config';
import { logger } from '../log';
import type { RunnerClient } from '../runs/RunnerClient';
import { LABELS, type Sandbox, type SandboxProvider } from '../sandbox/provider';

/** A pooled sandbox and the open connection to its runner, prepared but bound to no run. */
export interface Warm {
  sandbox: Sandbox;
  runner: RunnerClient;
  /** The claim is recorded in the sandbox itself (a shared pool's): no claim record is written. */
  recorded?: boolean;
}

/** One kind of pooled sandbox: a run can take it only when it asks for exactly these limits. */
export interface PoolTarget {
  limits: ResourceLimits;
  /** A template's image; undefined for the runner image. */
  image?: string;
  /** How many idle sandboxes of this class the pool keeps. */
  size: number;
}

export interface WarmPoolOptions {
  provider: SandboxProvider;
  instance: string;
  targets: PoolTarget[];
  /** Idle and starting sandboxes, over all classes. */
  maxTotal: number;
  /** The memory limits of idle and starting sandboxes, summed, may not pass this (MiB). */
  maxMemoryMb: number;
  /** Sandboxes being started for the pool at once. */
  concurrency: number;
  /**
   * Connects to a new pooled sandbox's runner and prepares it (all but the run), so a claim
   * is one `bind` over a connection that is already open and authenticated.
   */
  prepare: (sandbox: Sandbox) => Promise<RunnerClient>;
  /** Runs one start through the gateway's admission, so refills wait their turn behind creates. */
  admit: <T>(start: () => Promise<T>) => Promise<T>;
  /** Wait after a failed start before trying again, so a broken image does not spin. */
  retryMs?: number;
}

export interface PoolClassStats {
  key: string;
  limits: ResourceLimits;
  image?: string;
  target: number;
  idle: number;
  starting: number;
}

export interface PoolStats {
  classes: PoolClassStats[];
  /** Idle plus starting, over all classes. */
  total: number;
  maxTotal: number;
  /** Memory limits of idle and starting sandboxes, summed (MiB). */
  memoryMb: number;
  maxMemoryMb: number;
  claims: number;
  misses: number;
  failures: number;
}

interface PoolClass {
  key: string;
  limits: ResourceLimits;
  image?: string;
  target: number;
  idle: Warm[];
  starting: number;
}

/**
 * The class a run with these limits (and template image) belongs to. The key is a label value,
 * so an image shows in it as a short hash.
 */
export function classKey(limits: ResourceLimits, image?: string): string {
  const base = `m${limits.memoryMb}-c${limits.cpuMillis}-p${limits.pids}-d${limits.diskMb ?? 0}`;
  return image ? `${base}-i${createHash('sha256').update(image).digest('hex').slice(0, 12)}` : base;
}

/**
 * Sandboxes started ahead of demand, runner up and idle: connected and prepared but bound to
 * no run, with no tenant and an empty workspace. A claim hands one out at most once;
 * the run it becomes removes it at its end, and the pool starts a fresh one in its place.
 * Above the provider interface: any provider whose sandboxes can be created before their
 * run is known can be pooled this way.
 */
export class WarmPool {
  private readonly classes = new Map<string, PoolClass>();
  private inflight = 0;
  private closed = false;
  /** Told when no start is in flight any more (close waits for starts under way). */
  private drained: (() => void)[] = [];
  private retry?: NodeJS.Timeout;
  private claims = 0;
  private misses = 0;
  private failures = 0;
  private readonly changeListeners: (() => void)[] = [];

  constructor(private readonly opts: WarmPoolOptions) {
    for (const t of opts.targets) {
      if (t.size <= 0) continue;
      const key = classKey(t.limits, t.image);
      const c = this.classes.get(key);
      if (c) c.target += t.size;
      else this.classes.set(key, { key, limits: t.limits, image: t.image, target: t.size, idle: [], starting: 0 });
    }
  }

  /** Starts filling the pool in the background. */
  start(): void {
    this.fill();
  }

  /** An idle sandbox for a run with these limits and image, taken out of the pool; undefined on a miss. */
  claim(limits: ResourceLimits, image?: string): Warm | undefined {
    const c = this.classes.get(classKey(limits, image));
    const warm = c?.idle.shift();
    if (!warm) {
      this.misses++;
      return undefined;
    }
    this.claims++;
    this.changed();
    this.fill();
    return warm;
  }

  /**
   * Takes in an idle sandbox an earlier gateway started (its runner checked unbound and prepared
   * again), when its class is still kept here and there is room; false: the caller removes it.
   */
  adopt(key: string, warm: Warm): boolean {
    const c = this.classes.get(key);
    if (this.closed || !c || c.idle.length + c.starting >= c.target) return false;
    if (this.total + 1 > this.opts.maxTotal || this.memoryMb + c.limits.memoryMb > this.opts.maxMemoryMb) return false;
    this.keep(c, warm);
    this.changed();
    return true;
  }

  stats(): PoolStats {
    const classes = [...this.classes.values()].map((c) => ({
      key: c.key,
      limits: c.limits,
      ...(c.image ? { image: c.image } : {}),
      target: c.target,
      idle: c.idle.length,
      starting: c.starting,
    }));
    return {
      classes,
      total: this.total,
      maxTotal: this.opts.maxTotal,
      memoryMb: this.memoryMb,
      maxMemoryMb: this.opts.maxMemoryMb,
      claims: this.claims,
      misses: this.misses,
      failures: this.failures,
    };
  }

  /** Called whenever the pool's content changes (a sandbox ready, claimed or lost). */
  onChange(listener: () => void): void {
    this.changeListeners.push(listener);
  }

  private changed(): void {
    for (const l of this.changeListeners) l();
  }

  private get total(): number {
    let n = 0;
    for (const c of this.classes.values()) n += c.idle.length + c.starting;
    return n;
  }

  private get memoryMb(): number {
    let mb = 0;
    for (const c of this.classes.values()) mb += (c.idle.length + c.starting) * c.limits.memoryMb;
    return mb;
  }

  /** Starts what is missing, within the total, the memory budget and the concurrency. */
  private fill(): void {
    if (this.closed || this.retry) return;
    let progress = true;
    while (progress && this.inflight < this.opts.concurrency) {
      progress = false;
      for (const c of this.classes.values()) {
        if (this.inflight >= this.opts.concurrency) break;
        if (c.idle.length + c.starting >= c.target) continue;
        if (this.total + 1 > this.opts.maxTotal) return;
        if (this.memoryMb + c.limits.memoryMb > this.opts.maxMemoryMb) continue;
        void this.startOne(c);
        progress = true;
      }
    }
  }

  private async startOne(c: PoolClass): Promise<void> {
    this.inflight++;
    c.starting++;
    const id = `pool-${randomUUID()}`;
    let ok = false;
    try {
      const sandbox = await this.opts.admit(() => {
        if (this.closed) throw new Error('the pool is closed');
        return this.opts.provider.create({
          runId: id,
          tenant: '',
          limits: c.limits,
          ...(c.image ? { image: c.image } : {}),
          labels: {
            [LABELS.managed]: 'true',
            [LABELS.instance]: this.opts.instance,
            // Lets the provider's sweep tell this sandbox's workspace from an orphan's.
            [LABELS.runId]: id,
            [LABELS.pool]: c.key,
          },
        });
      });
      let runner: RunnerClient;
      try {
        if (this.closed) throw new Error('the pool is closed');
        runner = await this.opts.prepare(sandbox);
      } catch (err) {
        await this.opts.provider.remove(sandbox.id).catch(() => undefined);
        throw err;
      }
      if (this.closed) {
        runner.dispose();
        await this.opts.provider.remove(sandbox.id).catch(() => undefined);
        return;
      }
      this.keep(c, { sandbox, runner });
      ok = true;
    } catch (err) {
      this.failures++;
      if (!this.closed) logger.warn({ err: (err as Error).message }, 'could not start a pooled sandbox');
    } finally {
      c.starting--;
      this.inflight--;
      this.changed();
      if (this.inflight === 0) for (const done of this.drained.splice(0)) done();
    }
    if (ok) this.fill();
    else if (!this.closed && !this.retry) {
      this.retry = setTimeout(() => {
        this.retry = undefined;
        this.fill();
      }, this.opts.retryMs ?? 2000);
      this.retry.unref();
    }
  }

  /** Holds an idle sandbox until it is claimed; one that dies meanwhile leaves the pool and is replaced. */
  private keep(c: PoolClass, warm: Warm): void {
    c.idle.push(warm);
    const lost = (reason: string) => {
      const i = c.idle.indexOf(warm);
      if (i < 0) return; // claimed (its run watches it now) or let go
      c.idle.splice(i, 1);
      logger.warn({ sandbox: warm.sandbox.id, reason }, 'pooled sandbox ended while idle; replacing it');
      warm.runner.dispose();
      void this.opts.provider.remove(warm.sandbox.id).catch(() => undefined);
      this.changed();
      this.fill();
    };
    void warm.sandbox.exited.then((exit) => lost(exit.reason));
    warm.runner.onGone((err) => lost(err.message));
  }

  /** Stops refilling; leaves the sandboxes it holds as they are. */
  stop(): void {
    this.closed = true;
    if (this.retry) clearTimeout(this.retry);
  }

  /** Stops refilling and lets go of the idle sandboxes; they keep running, unbound, for a next gateway to adopt. */
  async release(): Promise<void> {
    for (const w of await this.drain()) w.runner.dispose();
  }

  /** Stops refilling and removes every idle sandbox (claimed ones belong to their runs). */
  async close(): Promise<void> {
    const idle = await this.drain();
    for (const w of idle) w.runner.dispose();
    await Promise.all(idle.map((w) => this.opts.provider.remove(w.sandbox.id).catch(() => undefined)));
  }

  /** Stops refilling, waits for starts under way (they remove what they started) and empties the pool. */
  private async drain(): Promise<Warm[]> {
    this.stop();
    if (this.inflight > 0) await new Promise<void>((r) => this.drained.push(r));
    return [...this.classes.values()].flatMap((c) => c.idle.splice(0));
  }
}
