import * as k8s from '@kubernetes/client-node';
import { logger } from '../../log';
import type { ApiCounter } from './apiCounter';

export type PodChange = 'added' | 'changed' | 'removed';
export type PodListener = (change: PodChange, pod: k8s.V1Pod) => void;

export interface PodInformerOptions {
  /** A full list again this often, whatever the watch said: an event lost anywhere is made up for. */
  resyncMs: number;
  /** The API server ends each watch after this long (a little randomized): a dead connection is replaced. */
  watchSeconds: number;
  /** Wait after a failed list or watch before the next try (doubles up to 30 s). */
  retryMs?: number;
}

const status = (err: unknown) =>
  (err as { statusCode?: number; code?: number }).statusCode ??
  (err as { code?: number }).code ??
  (err as { response?: { statusCode?: number } }).response?.statusCode;

const rvOf = (pod: k8s.V1Pod) => pod.metadata?.resourceVersion ?? '';

/**
 * The pods of one label selector in one namespace, as the API server has them: one list, then
 * one watch from the list's resourceVersion (bookmarks keep the version current, so a watch
 * renewed after its timeout starts where the last one ended, not with a new list). A list again
 * when the version has expired (410), after a failure, and every `resyncMs` (a resync: what the
 * watch missed is reported then). Every replica holds one: what others created, claimed or
 * removed reaches it as a watch event, not by asking.
 */
export class PodInformer {
  private readonly pods = new Map<string, k8s.V1Pod>();
  private readonly listeners: PodListener[] = [];
  /** Waiters on one pod (`until`), by name: looked at again on each of its changes. */
  private readonly waiters = new Map<string, Set<() => void>>();
  private resourceVersion = '';
  private request?: { abort(): void };
  private resyncTimer?: NodeJS.Timeout;
  private retryTimer?: NodeJS.Timeout;
  private retryMs: number;
  private stopped = false;
  private started?: Promise<void>;
  /** Bumped whenever a list replaces the watch, so events of a watch being abandoned are dropped. */
  private generation = 0;

  constructor(
    private readonly kc: k8s.KubeConfig,
    private readonly core: k8s.CoreV1Api,
    private readonly ns: string,
    private readonly selector: string,
    private readonly opts: PodInformerOptions,
    private readonly counter?: ApiCounter,
  ) {
    this.retryMs = opts.retryMs ?? 1000;
  }

  /** Resolves once the first list is in (the picture is whole); later calls return the same promise. */
  start(): Promise<void> {
    this.started ??= this.relist().catch((err) => {
      this.started = undefined;
      throw err;
    });
    return this.started;
  }

  on(listener: PodListener): void {
    this.listeners.push(listener);
  }

  get(name: string): k8s.V1Pod | undefined {
    return this.pods.get(name);
  }

  list(): k8s.V1Pod[] {
    return [...this.pods.values()];
  }

  /**
   * What `test` finds in pod `name` (undefined while it is not there), looked at now and at each
   * change of it: resolves with the first value it returns, rejects when it throws, or after
   * `timeoutMs` with `late`'s error.
   */
  until<T>(
    name: string,
    test: (pod: k8s.V1Pod | undefined) => T | undefined,
    timeoutMs: number,
    late: (pod: k8s.V1Pod | undefined) => Error,
  ): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      let set = this.waiters.get(name);
      if (!set) this.waiters.set(name, (set = new Set()));
      const done = () => {
        clearTimeout(timer);
        set!.delete(look);
        if (set!.size === 0 && this.waiters.get(name) === set) this.waiters.delete(name);
      };
      const look = () => {
        try {
          const value = test(this.pods.get(name));
          if (value === undefined) return;
          done();
          resolve(value);
        } catch (err) {
          done();
          reject(err);
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(late(this.pods.get(name)));
      }, timeoutMs);
      set.add(look);
      look();
    });
  }

  stop(): void {
    this.stopped = true;
    this.generation++;
    clearTimeout(this.resyncTimer);
    clearTimeout(this.retryTimer);
    this.request?.abort();
    this.request = undefined;
  }

  /** Lists anew, reports the differences, and watches from there. */
  private async relist(): Promise<void> {
    if (this.stopped) return;
    const generation = ++this.generation;
    this.request?.abort();
    this.request = undefined;
    clearTimeout(this.resyncTimer);
    this.counter?.count('list');
    const { body } = await this.core.listNamespacedPod(
      this.ns,
      undefined,
      undefined,
      undefined,
      undefined,
      this.selector,
    );
    if (generation !== this.generation) return;
    const seen = new Set<string>();
    for (const pod of body.items) {
      const name = pod.metadata?.name;
      if (!name) continue;
      seen.add(name);
      this.put(pod);
    }
    for (const [name, pod] of [...this.pods]) {
      if (seen.has(name)) continue;
      this.pods.delete(name);
      this.emit('removed', pod);
    }
    this.resourceVersion = body.metadata?.resourceVersion ?? '';
    this.retryMs = this.opts.retryMs ?? 1000;
    this.resyncTimer = setTimeout(() => this.again('resync'), this.opts.resyncMs);
    this.resyncTimer.unref();
    await this.watch(generation);
  }

  private async watch(generation: number): Promise<void> {
    if (this.stopped || generation !== this.generation) return;
    // Spread over ±10 %, so that replicas started together do not renew together.
    const timeoutSeconds = Math.max(1, Math.round(this.opts.watchSeconds * (0.9 + Math.random() * 0.2)));
    this.counter?.count('watch');
    try {
      const req = await new k8s.Watch(this.kc).watch(
        `/api/v1/namespaces/${this.ns}/pods`,
        {
          labelSelector: this.selector,
          resourceVersion: this.resourceVersion,
          allowWatchBookmarks: true,
          timeoutSeconds,
        },
        (type: string, obj: k8s.V1Pod & k8s.V1Status) => {
          if (generation !== this.generation) return;
          if (type === 'ERROR') {
            // 410 Gone: the version is too old to watch from; anything else, a list sets it right too.
            this.again(obj?.code === 410 ? 'expired' : `watch error ${obj?.code}: ${obj?.message}`);
            return;
          }
          const rv = rvOf(obj);
          if (rv) this.resourceVersion = rv;
          if (type === 'BOOKMARK') return;
          const name = obj?.metadata?.name;
          if (!name) return;
          if (type === 'DELETED') {
            this.pods.delete(name);
            this.emit('removed', obj);
          } else this.put(obj);
        },
        (err: unknown) => {
          if (generation !== this.generation || this.stopped) return;
          if (!err) return void this.watch(generation); // the server's timeout: go on from where it ended
          this.again(status(err) === 410 ? 'expired' : `watch ended: ${(err as Error).message ?? err}`);
        },
      );
      if (generation !== this.generation) (req as { abort(): void }).abort();
      else this.request = req as { abort(): void };
    } catch (err) {
      if (generation === this.generation) this.again(`watch failed: ${(err as Error).message}`);
    }
  }

  /** A new list: at once for a resync or an expired version, after a growing wait for a failure. */
  private again(why: string): void {
    if (this.stopped) return;
    this.generation++;
    this.request?.abort();
    this.request = undefined;
    const failure = why !== 'resync' && why !== 'expired';
    if (failure) logger.warn({ namespace: this.ns, why }, 'pod watch interrupted; listing again');
    const wait = failure ? this.retryMs : 0;
    if (failure) this.retryMs = Math.min(30_000, this.retryMs * 2);
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => {
      void this.relist().catch((err: Error) => this.again(`list failed: ${err.message}`));
    }, wait);
    this.retryTimer.unref();
  }

  private put(pod: k8s.V1Pod): void {
    const name = pod.metadata!.name!;
    const old = this.pods.get(name);
    if (old && rvOf(old) === rvOf(pod)) return;
    this.pods.set(name, pod);
    this.emit(old ? 'changed' : 'added', pod);
  }

  private emit(change: PodChange, pod: k8s.V1Pod): void {
    const name = pod.metadata?.name;
    if (name) for (const look of [...(this.waiters.get(name) ?? [])]) look();
    for (const l of this.listeners) {
      try {
        l(change, pod);
      } catch (err) {
        logger.error({ err: (err as Error).message, pod: pod.metadata?.name }, 'pod listener failed');
      }
    }
  }
}
