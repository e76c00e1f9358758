import { randomUUID } from 'node:crypto';
import * as os from 'node:os';
import type * as k8s from '@kubernetes/client-node';
import { logger } from '../../log';
import {
  LABELS,
  type Sandbox,
  type SandboxSpec,
  type SharedClaim,
  type SharedPoolClassStats,
  type SharedPoolOptions,
  type SharedSandboxPool,
} from '../provider';
import type { ApiCounter } from './apiCounter';
import { LeaderLease } from './lease';
import type { PodInformer } from './podInformer';
import { podExit } from './podExit';
import {
  BOOTED_ANNOTATION,
  CLAIM_ANNOTATION,
  CONTAINER,
  LABELS_ANNOTATION,
  POOL_STATE_LABEL,
  podName,
  selectorLabels,
} from './podSpec';
import { mergePatchPodMetadata, statusOf } from './apiErrors';

/** How often the filling replica looks at the pool (its own picture: no request) and its lease. */
const FILL_EVERY_MS = 2000;
const LEASE_SECONDS = 15;
const RENEW_MS = 5000;
const LEASE_RETRY_MS = 5000;
/** A pod left `starting` this long after its start timeout was abandoned by a replica that died. */
const STUCK_GRACE_MS = 30_000;

export interface KubernetesPoolDeps {
  kc: k8s.KubeConfig;
  core: k8s.CoreV1Api;
  ns: string;
  instance: string;
  informer: PodInformer;
  counter: ApiCounter;
  startTimeoutMs: number;
  ready(): Promise<void>;
  create(spec: SandboxSpec): Promise<Sandbox>;
  /** A sandbox for a running, booted pod. */
  attach(pod: k8s.V1Pod): Promise<Sandbox>;
  remove(id: string): Promise<void>;
  /** Lets go of a pod's sandbox without touching the pod. */
  release(id: string): void;
  /** A pod this replica holds is run `runId`'s from now on. */
  claimed(id: string, runId: string): void;
}

interface Link {
  key: string;
  sandbox?: Sandbox;
  link?: unknown;
  /** This replica is claiming it now: its change to `claimed` is not another's claim. */
  taking?: boolean;
  opening?: Promise<void>;
}

type PoolState = 'starting' | 'idle' | 'claimed';

/** A pooled pod's class and state, when it is a live pooled pod of this instance. */
function pooled(pod: k8s.V1Pod): { key: string; state: PoolState } | undefined {
  const key = pod.metadata?.labels?.[LABELS.pool];
  const state = pod.metadata?.labels?.[POOL_STATE_LABEL] as PoolState | undefined;
  if (!key || !state || pod.metadata?.deletionTimestamp || podExit(pod)) return undefined;
  return { key, state };
}

function idleAndBooted(pod: k8s.V1Pod): boolean {
  const running = pod.status?.containerStatuses?.find((c) => c.name === CONTAINER)?.state?.running;
  return (
    pooled(pod)?.state === 'idle' &&
    pod.status?.phase === 'Running' &&
    !!running &&
    !!pod.metadata?.annotations?.[BOOTED_ANNOTATION]
  );
}

/** Watch events carry times as strings, lists as Dates. */
const created = (pod: k8s.V1Pod) => new Date(pod.metadata?.creationTimestamp ?? Date.now()).getTime();

const memoryMb = (pod: k8s.V1Pod) => {
  const m = /^(\d+)Mi$/.exec(pod.spec?.containers?.[0]?.resources?.limits?.memory ?? '');
  return m ? Number(m[1]) : 0;
};

/**
 * The warm pool kept in the cluster, shared by every replica of an instance. Pooled pods are
 * labelled `dev.tether.pool=<class>` and `dev.tether.pool-state`: `starting` while the filling
 * replica boots and prepares the runner, `idle` once any replica may claim it, `claimed` once a
 * run's. The pod's labels and annotations then say whose run it is, as a cold run's do: every
 * replica finds it like any other run.
 *
 * - A claim is one merge patch of the pod guarded by the resourceVersion the claimer saw: the
 *   API server refuses the second of two claims of one pod (409), so no pod is claimed twice;
 *   the loser tries another. A replica that dies right after its claim leaves a pod that is
 *   already a run: any replica takes it up (and, the claim unanswered, removes it: see
 *   RunRecovery).
 * - Every replica holds a connection to each idle pod's runner (`link`), opened when it turns
 *   idle, so that a claim is the patch and `bind` over an open connection.
 * - One replica at a time fills the pool: the holder of the Lease `tether-pool-<instance>`. It
 *   counts from its informer (plus the pods it has asked for and not seen yet), so it never
 *   starts more than the target; another takes over within the lease's 15 s if it dies, and
 *   removes what a dead filler left `starting`.
 */
export class KubernetesPool implements SharedSandboxPool {
  private opts?: SharedPoolOptions<unknown>;
  private readonly links = new Map<string, Link>();
  /** Pods this replica asked for and has not seen in its informer yet. */
  private readonly asked = new Map<string, { key: string; memoryMb: number }>();
  private readonly starting = new Set<string>();
  private lease?: LeaderLease;
  private timer?: NodeJS.Timeout;
  private retryAfter = 0;
  private closed = false;
  private claims = 0;
  private misses = 0;
  private conflicts = 0;
  readonly identity = `${os.hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;

  constructor(private readonly deps: KubernetesPoolDeps) {}

  async start<L>(opts: SharedPoolOptions<L>): Promise<void> {
    if (this.opts) return;
    this.opts = opts as SharedPoolOptions<unknown>;
    await this.deps.ready();
    this.deps.informer.on((_change, pod) => this.seen(pod));
    for (const pod of this.deps.informer.list()) this.seen(pod);
    if (!opts.classes.some((c) => c.size > 0) || opts.maxTotal <= 0) return;
    this.lease = new LeaderLease(
      this.deps.kc,
      {
        name: leaseName(this.deps.instance),
        namespace: this.deps.ns,
        identity: this.identity,
        durationSeconds: LEASE_SECONDS,
        renewMs: RENEW_MS,
        retryMs: LEASE_RETRY_MS,
      },
      this.deps.counter,
    );
    this.lease.onChange((leading) => {
      logger.info(
        { replica: this.identity, leading },
        leading ? 'filling the shared pool' : 'no longer filling the pool',
      );
      if (leading) this.fill();
    });
    this.lease.start();
    this.timer = setInterval(() => this.fill(), FILL_EVERY_MS);
    this.timer.unref();
  }

  /**
   * An idle pod of class `key` this replica holds a connection to, claimed for the run by a
   * patch guarded by its resourceVersion. Pods are tried in a random order, so that replicas
   * claiming at once seldom reach for the same one.
   */
  async claim<L>(
    key: string,
    run: { runId: string; tenant: string; labels: Record<string, string> },
  ): Promise<SharedClaim<L> | undefined> {
    const candidates = [...this.links].filter(([, l]) => l.key === key && l.link && !l.taking);
    for (let i = candidates.length - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1));
      [candidates[i], candidates[j]] = [candidates[j], candidates[i]];
    }
    for (const [id, entry] of candidates) {
      const pod = this.deps.informer.get(id);
      if (!pod || !idleAndBooted(pod) || entry.taking || this.links.get(id) !== entry) continue;
      entry.taking = true;
      let won = false;
      try {
        won = await this.patchClaim(pod, run);
      } catch (err) {
        logger.warn({ pod: id, err: (err as Error).message }, 'claiming a pooled pod failed');
      } finally {
        entry.taking = false;
      }
      if (!won) continue;
      this.links.delete(id);
      this.deps.claimed(id, run.runId);
      this.claims++;
      this.fill();
      return { sandbox: entry.sandbox!, link: entry.link as L };
    }
    this.misses++;
    return undefined;
  }

  /** The claim itself: true when this replica got the pod. A 409 with the pod still idle is tried again once. */
  private async patchClaim(
    pod: k8s.V1Pod,
    run: { runId: string; tenant: string; labels: Record<string, string> },
  ): Promise<boolean> {
    const name = pod.metadata!.name!;
    let version = pod.metadata!.resourceVersion!;
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        await mergePatchPodMetadata(this.deps.core, this.deps.ns, name, {
          resourceVersion: version,
          labels: { ...selectorLabels(run.labels), [POOL_STATE_LABEL]: 'claimed' },
          annotations: {
            [LABELS_ANNOTATION]: JSON.stringify(run.labels),
            [CLAIM_ANNOTATION]: JSON.stringify({ by: this.identity, at: new Date().toISOString() }),
          },
        });
        return true;
      } catch (err) {
        if (statusOf(err) === 404) return false;
        if (statusOf(err) !== 409) throw err;
        this.conflicts++;
        // The pod changed since this replica saw it: another's claim, or only its status.
        const now = (await this.deps.core.readNamespacedPod(name, this.deps.ns).catch(() => undefined))?.body;
        if (!now || !idleAndBooted(now)) return false;
        version = now.metadata!.resourceVersion!;
      }
    }
    return false;
  }

  stats(): SharedPoolClassStats[] {
    const counts = this.counts();
    return (this.opts?.classes ?? []).map((c) => ({
      key: c.key,
      target: c.size,
      idle: counts.get(c.key)?.idle ?? 0,
      starting: counts.get(c.key)?.starting ?? 0,
      linked: [...this.links.values()].filter((l) => l.key === c.key && l.link).length,
    }));
  }

  /** Claims, misses and claim conflicts since this replica started: for the benchmark and the log. */
  counters(): { claims: number; misses: number; conflicts: number } {
    return { claims: this.claims, misses: this.misses, conflicts: this.conflicts };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.timer);
    await this.lease?.stop();
    for (const [id, entry] of this.links) this.drop(id, entry);
  }

  /** A pooled pod changed: this replica links to it when it turns idle, and lets go once it is claimed or gone. */
  private seen(pod: k8s.V1Pod): void {
    const id = pod.metadata?.name;
    if (!id || !pod.metadata?.labels?.[LABELS.pool]) return;
    this.asked.delete(id);
    const entry = this.links.get(id);
    const alive = this.deps.informer.get(id) === pod;
    if (alive && idleAndBooted(pod) && !this.closed) {
      if (!entry) this.open(id, pooled(pod)!.key, pod);
    } else if (entry && !entry.taking) this.drop(id, entry);
    this.fill();
  }

  private open(id: string, key: string, pod: k8s.V1Pod): void {
    const entry: Link = { key };
    this.links.set(id, entry);
    entry.opening = (async () => {
      const sandbox = await this.deps.attach(pod);
      entry.sandbox = sandbox;
      const link = await this.opts!.link(sandbox);
      if (this.links.get(id) !== entry) return void this.opts!.unlink(link);
      entry.link = link;
      // A sandbox that ends while idle is dropped (the informer says so too; this is sooner).
      void sandbox.exited.then(() => this.links.get(id) === entry && !entry.taking && this.drop(id, entry));
    })().catch((err: Error) => {
      logger.debug({ pod: id, err: err.message }, 'could not connect to a pooled pod');
      if (this.links.get(id) === entry) this.links.delete(id);
      if (entry.sandbox) this.deps.release(id);
    });
  }

  private drop(id: string, entry: Link): void {
    if (this.links.get(id) === entry) this.links.delete(id);
    if (entry.link) this.opts?.unlink(entry.link);
    if (entry.sandbox) this.deps.release(id);
    entry.link = undefined;
    entry.sandbox = undefined;
  }

  /** Idle and starting pods (and memory) per class, from the informer plus what this replica asked for. */
  private counts(): Map<string, { idle: number; starting: number; memoryMb: number; pods: k8s.V1Pod[] }> {
    const out = new Map<string, { idle: number; starting: number; memoryMb: number; pods: k8s.V1Pod[] }>();
    const of = (key: string) => {
      let c = out.get(key);
      if (!c) out.set(key, (c = { idle: 0, starting: 0, memoryMb: 0, pods: [] }));
      return c;
    };
    for (const pod of this.deps.informer.list()) {
      const p = pooled(pod);
      if (!p || p.state === 'claimed') continue;
      const c = of(p.key);
      if (p.state === 'idle') c.idle++;
      else c.starting++;
      c.memoryMb += memoryMb(pod);
      c.pods.push(pod);
    }
    for (const a of this.asked.values()) {
      const c = of(a.key);
      c.starting++;
      c.memoryMb += a.memoryMb;
    }
    return out;
  }

  /** Where this replica holds the lease: starts what the pool lacks, removes what it has too much of. */
  private fill(): void {
    const opts = this.opts;
    if (!opts || this.closed || !this.lease?.leading || Date.now() < this.retryAfter) return;
    const counts = this.counts();
    let total = 0;
    let mem = 0;
    for (const c of counts.values()) {
      total += c.idle + c.starting;
      mem += c.memoryMb;
    }
    this.sweepStuck(counts);
    for (const cls of opts.classes) {
      const c = counts.get(cls.key) ?? { idle: 0, starting: 0, memoryMb: 0, pods: [] };
      let have = c.idle + c.starting;
      // More than the class keeps (a lease handed over mid-start, a smaller size): the newest idle ones go.
      if (c.idle > cls.size) this.trim(c.pods, c.idle - cls.size);
      while (
        have < cls.size &&
        total < opts.maxTotal &&
        mem + cls.limits.memoryMb <= opts.maxMemoryMb &&
        this.starting.size < opts.concurrency
      ) {
        have++;
        total++;
        mem += cls.limits.memoryMb;
        void this.startOne(cls.key, cls.limits, cls.image);
      }
    }
  }

  private async startOne(key: string, limits: SandboxSpec['limits'], image?: string): Promise<void> {
    const opts = this.opts!;
    const id = `pool-${randomUUID()}`;
    this.starting.add(id);
    // Counted as starting until the informer shows the pod: a fill meanwhile does not start another.
    this.asked.set(podName(id), { key, memoryMb: limits.memoryMb });
    let made: Sandbox | undefined;
    try {
      made = await this.deps.create({
        runId: id,
        tenant: '',
        limits,
        ...(image ? { image } : {}),
        labels: { ...opts.labels, [LABELS.runId]: id, [LABELS.pool]: key },
      });
      await opts.prepare(made);
      // Claimable from now on, by every replica (this one links to it like the others, on the event).
      await mergePatchPodMetadata(this.deps.core, this.deps.ns, made.id, { labels: { [POOL_STATE_LABEL]: 'idle' } });
      this.deps.release(made.id);
    } catch (err) {
      logger.warn({ err: (err as Error).message }, 'could not start a pooled pod');
      this.retryAfter = Date.now() + 2000;
      if (made) await this.deps.remove(made.id).catch(() => undefined);
    } finally {
      this.starting.delete(id);
      this.asked.delete(podName(id));
    }
    this.fill();
  }

  /** Pods another filler left `starting` and never finished (it died): removed, so the count is true. */
  private sweepStuck(counts: ReturnType<KubernetesPool['counts']>): void {
    const limit = this.deps.startTimeoutMs + STUCK_GRACE_MS;
    for (const c of counts.values())
      for (const pod of c.pods) {
        const name = pod.metadata!.name!;
        const age = Date.now() - created(pod);
        if (pooled(pod)?.state !== 'starting' || age < limit || this.starting.has(name.replace(/^tether-/, '')))
          continue;
        logger.warn({ pod: name }, 'removing a pooled pod left starting');
        void this.deps.remove(name).catch(() => undefined);
      }
  }

  /** Deletes the newest idle pods, each only if it is still the version seen (not claimed meanwhile). */
  private trim(pods: k8s.V1Pod[], n: number): void {
    const idle = pods
      .filter((p) => pooled(p)?.state === 'idle')
      .sort((a, b) => created(b) - created(a))
      .slice(0, n);
    for (const pod of idle) {
      const name = pod.metadata!.name!;
      void this.deps.core
        .deleteNamespacedPod(name, this.deps.ns, undefined, undefined, 0, undefined, undefined, {
          preconditions: { resourceVersion: pod.metadata!.resourceVersion },
        })
        .catch(() => undefined);
    }
  }
}

/** The pool's Lease: one per instance, a DNS name. */
export function leaseName(instance: string): string {
  return `tether-pool-${instance.toLowerCase().replace(/[^a-z0-9-]/g, '-')}`.slice(0, 63).replace(/-+$/, '');
}
