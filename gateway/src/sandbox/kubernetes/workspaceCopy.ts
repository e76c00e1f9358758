import type * as k8s from '@kubernetes/client-node';
import { LABELS } from '../provider';
import { COPY_EACH } from '../workspaceCopy';
import { bodyMessage, statusOf } from './apiErrors';
import { eventsAbout, eventTime } from './events';
import { containerSecurity, podSecurity } from './podSpec';

/**
 * On a copier pod, with the instance label: not a run's pod (the informer selects
 * `dev.tether.managed`, which a copier lacks), and found by a later sweep if its replica died.
 */
export const COPIER_LABEL = 'dev.tether.workspace-copy';

const POLL_MS = 250;

export interface CopierOptions {
  namespace: string;
  instance: string;
  image: string;
  uid: number;
  gid: number;
  runtimeClassName?: string;
  /** How long the copy may run before the kubelet ends it. */
  deadlineSeconds: number;
}

/**
 * The pod that copies claim `from` (read-only) into each of `into`, as the runs' user, hardened
 * like a run's pod: no token, no privilege, read-only root, seccomp, the runs' runtime class. A
 * claim bound on first use is bound here, on the node of `from` (the scheduler follows the
 * bound volume), so every fork's workspace is where its parent's is.
 */
export function copierPod(name: string, from: string, into: string[], opts: CopierOptions): k8s.V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      namespace: opts.namespace,
      labels: { [LABELS.instance]: opts.instance, [COPIER_LABEL]: 'true' },
    },
    spec: {
      restartPolicy: 'Never',
      activeDeadlineSeconds: opts.deadlineSeconds,
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      terminationGracePeriodSeconds: 0,
      runtimeClassName: opts.runtimeClassName || undefined,
      securityContext: podSecurity(opts.uid, opts.gid),
      containers: [
        {
          name: 'copy',
          image: opts.image,
          imagePullPolicy: 'IfNotPresent',
          command: ['sh', '-c', COPY_EACH, 'copy', ...into.map((_, i) => `/to/${i}`)],
          // A failed copy's last lines reach its status, read without the pods/log permission.
          terminationMessagePolicy: 'FallbackToLogsOnError',
          securityContext: containerSecurity(),
          resources: {
            requests: { cpu: '100m', memory: '64Mi' },
            limits: { cpu: '1', memory: '256Mi' },
          },
          volumeMounts: [
            { name: 'from', mountPath: '/from', readOnly: true },
            ...into.map((_, i) => ({ name: `to-${i}`, mountPath: `/to/${i}` })),
          ],
        },
      ],
      volumes: [
        { name: 'from', persistentVolumeClaim: { claimName: from, readOnly: true } },
        ...into.map((claimName, i) => ({ name: `to-${i}`, persistentVolumeClaim: { claimName } })),
      ],
    },
  };
}

/**
 * Copies one workspace claim into others by a copier pod: created, waited for until it ends,
 * always deleted. Needs pods create/get/delete, which runs need anyway.
 */
export class WorkspaceCopier {
  constructor(
    private readonly core: k8s.CoreV1Api,
    private readonly opts: Omit<CopierOptions, 'image'>,
  ) {}

  async copy(name: string, from: string, into: string[], image: string): Promise<void> {
    const pod = copierPod(name, from, into, { ...this.opts, image });
    try {
      await this.core.createNamespacedPod(this.opts.namespace, pod);
    } catch (err) {
      throw new Error(`could not create the workspace copier ${name}: ${bodyMessage(err)}`);
    }
    try {
      await this.finished(name);
    } finally {
      await this.core.deleteNamespacedPod(name, this.opts.namespace, undefined, undefined, 0).catch(() => undefined);
    }
  }

  /** Until the copier's container ended: resolves when it succeeded, else rejects saying why. */
  private async finished(name: string): Promise<void> {
    // Past its deadline the kubelet fails the pod; a pod never scheduled has no kubelet to.
    const deadline = Date.now() + (this.opts.deadlineSeconds + 30) * 1000;
    for (;;) {
      let pod: k8s.V1Pod;
      try {
        pod = (await this.core.readNamespacedPod(name, this.opts.namespace)).body;
      } catch (err) {
        if (statusOf(err) === 404) throw new Error(`the workspace copier ${name} was deleted before it finished`);
        throw err;
      }
      const phase = pod.status?.phase;
      if (phase === 'Succeeded') return;
      if (phase === 'Failed' || Date.now() > deadline)
        throw new Error(`the workspace copy failed: ${await this.reason(pod)}`);
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }

  private async reason(pod: k8s.V1Pod): Promise<string> {
    const ended = pod.status?.containerStatuses?.[0]?.state?.terminated;
    if (ended) return `exit code ${ended.exitCode}${ended.message ? `: ${ended.message.trim()}` : ''}`;
    const events = await eventsAbout(this.core, this.opts.namespace, 'Pod', pod.metadata!.name!);
    const last = events.sort((a, b) => eventTime(b) - eventTime(a))[0];
    const why = pod.status?.reason ?? pod.status?.phase ?? 'unknown';
    return `${why}${last ? ` (${last.reason}: ${(last.message ?? '').trim()})` : ''}`;
  }

  /** Copiers of this instance whose replica is gone: older than any copy may run. */
  async sweep(): Promise<number> {
    const selector = `${LABELS.instance}=${this.opts.instance},${COPIER_LABEL}=true`;
    const { items } = (
      await this.core.listNamespacedPod(this.opts.namespace, undefined, undefined, undefined, undefined, selector)
    ).body;
    const before = Date.now() - (this.opts.deadlineSeconds + 60) * 1000;
    let removed = 0;
    for (const pod of items) {
      const created = new Date(pod.metadata?.creationTimestamp ?? 0).getTime();
      if (created > before) continue;
      await this.core
        .deleteNamespacedPod(pod.metadata!.name!, this.opts.namespace, undefined, undefined, 0)
        .then(() => removed++)
        .catch(() => undefined);
    }
    return removed;
  }
}
