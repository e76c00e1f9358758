import * as k8s from '@kubernetes/client-node';
import { logger } from '../../log';
import type { ApiCounter } from './apiCounter';
import { statusOf } from './apiErrors';

export interface LeaseOptions {
  name: string;
  namespace: string;
  identity: string;
  /** Another replica takes over a lease not renewed for this long. */
  durationSeconds: number;
  /** The holder renews this often; the others look this often whether it lapsed. */
  renewMs: number;
  retryMs: number;
}

/**
 * One holder at a time among the replicas, by a `coordination.k8s.io` Lease: it is taken by a
 * create or a replace guarded by the Lease's resourceVersion, so two replicas never both
 * believe they hold it for longer than it takes one of them to see its renewal refused. The
 * holder that stops renewing (it died) loses it after `durationSeconds`.
 */
export class LeaderLease {
  private readonly api: k8s.CoordinationV1Api;
  private lease?: k8s.V1Lease;
  private timer?: NodeJS.Timeout;
  private stopped = false;
  leading = false;
  private readonly listeners: ((leading: boolean) => void)[] = [];

  constructor(
    kc: k8s.KubeConfig,
    private readonly opts: LeaseOptions,
    counter?: ApiCounter,
  ) {
    this.api = kc.makeApiClient(k8s.CoordinationV1Api);
    counter?.intercept(this.api);
  }

  onChange(listener: (leading: boolean) => void): void {
    this.listeners.push(listener);
  }

  start(): void {
    void this.tick();
  }

  /** Stops renewing; a held lease is given up at once (its renew time set to the epoch) for the next holder. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.leading && this.lease) {
      this.set(false);
      const released = { ...this.lease, spec: { ...micro(this.lease.spec), renewTime: new k8s.V1MicroTime(0) } };
      await this.api
        .replaceNamespacedLease(this.opts.name, this.opts.namespace, released as k8s.V1Lease)
        .catch(() => undefined);
    }
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    try {
      await (this.leading && this.lease ? this.renew(this.lease) : this.tryTake());
    } catch (err) {
      // Said either way: a lease nobody can take is a pool nobody fills.
      logger.warn(
        { err: (err as Error).message, lease: this.opts.name },
        this.leading ? 'lease lost' : 'could not read or take the lease',
      );
      this.set(false);
    }
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.tick(), this.leading ? this.opts.renewMs : this.opts.retryMs);
    this.timer.unref();
  }

  private async tryTake(): Promise<void> {
    let current: k8s.V1Lease | undefined;
    try {
      current = (await this.api.readNamespacedLease(this.opts.name, this.opts.namespace)).body;
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
    }
    const now = new Date();
    if (!current) {
      try {
        this.lease = (
          await this.api.createNamespacedLease(this.opts.namespace, {
            metadata: { name: this.opts.name, namespace: this.opts.namespace },
            spec: this.spec(now, 0),
          })
        ).body;
        this.set(true);
      } catch (err) {
        if (statusOf(err) !== 409) throw err; // another replica made it first
      }
      return;
    }
    const spec = current.spec ?? {};
    const renewed = spec.renewTime ? new Date(spec.renewTime as unknown as string).getTime() : 0;
    const lapsed = renewed + (spec.leaseDurationSeconds ?? this.opts.durationSeconds) * 1000 < now.getTime();
    if (spec.holderIdentity !== this.opts.identity && !lapsed) return;
    const transitions = (spec.leaseTransitions ?? 0) + (spec.holderIdentity === this.opts.identity ? 0 : 1);
    try {
      this.lease = (
        await this.api.replaceNamespacedLease(this.opts.name, this.opts.namespace, {
          metadata: { ...current.metadata },
          spec: this.spec(now, transitions),
        })
      ).body;
      this.set(true);
    } catch (err) {
      if (statusOf(err) !== 409) throw err; // another replica took it first
    }
  }

  private async renew(lease: k8s.V1Lease): Promise<void> {
    const spec = { ...micro(lease.spec), renewTime: new k8s.V1MicroTime() };
    // Guarded by the resourceVersion this holder last wrote: a refusal means another replica took it.
    this.lease = (
      await this.api.replaceNamespacedLease(this.opts.name, this.opts.namespace, { metadata: lease.metadata, spec })
    ).body;
  }

  private spec(now: Date, transitions: number): k8s.V1LeaseSpec {
    return {
      holderIdentity: this.opts.identity,
      leaseDurationSeconds: this.opts.durationSeconds,
      acquireTime: new k8s.V1MicroTime(now.getTime()),
      renewTime: new k8s.V1MicroTime(now.getTime()),
      leaseTransitions: transitions,
    };
  }

  private set(leading: boolean): void {
    if (this.leading === leading) return;
    this.leading = leading;
    for (const l of this.listeners) l(leading);
  }
}

/** The spec as read back, its times made MicroTimes again: the API server takes only their six-digit form. */
function micro(spec: k8s.V1LeaseSpec | undefined): k8s.V1LeaseSpec {
  const t = (v: unknown) => (v ? new k8s.V1MicroTime(new Date(v as string).getTime()) : undefined);
  return { ...spec, acquireTime: t(spec?.acquireTime), renewTime: t(spec?.renewTime) };
}
