import type { V1Pod, V1PodSecurityContext, V1SecurityContext } from '@kubernetes/client-node';
import { EGRESS_MOUNT, egressEnvironment } from '../../egress/service';
import { LABELS, type SandboxSpec } from '../provider';
import { workspaceVolume } from './workspaceVolume';

export const CONTAINER = 'runner';
export const WORKSPACE = '/workspace';
export const HOME = '/home/tether';
/** The runner's socket directory inside the pod: an emptyDir, the connector's way in. */
export const SOCKET_DIR = '/run/tether';
export const SOCKET_PATH = `${SOCKET_DIR}/runner.sock`;
/** The name of the runner's port in a pod of the tcp transport. */
export const RUNNER_PORT_NAME = 'runner';
/** Where the runner leaves why it ended the run (an OOM kill); the kubelet puts it in the pod's status. */
export const TERMINATION_MESSAGE_PATH = '/dev/termination-log';
/** Every label of a run, as JSON: Kubernetes label values cannot hold them all (63 characters). */
export const LABELS_ANNOTATION = 'dev.tether.labels';
/** The id the run's secret is derived from: the run's id, or a pooled pod's own (it keeps it once claimed). */
export const BOOT_ID_ANNOTATION = 'dev.tether.boot-id';
/** Set once the runner has its boot line: another replica may connect without probing for the socket. */
export const BOOTED_ANNOTATION = 'dev.tether.booted';
/** A pooled pod's state: `starting` (being booted and prepared), `idle` (claimable), `claimed` (a run's). */
export const POOL_STATE_LABEL = 'dev.tether.pool-state';
/** On a claimed pooled pod: which replica claimed it, and when (JSON `{by, at}`). */
export const CLAIM_ANNOTATION = 'dev.tether.claim';
/** The labels a pod carries as Kubernetes labels: the ones runs are found and selected by. */
export const SELECTOR_LABELS: string[] = [LABELS.managed, LABELS.instance, LABELS.runId, LABELS.tenant, LABELS.pool];
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

export interface PodOptions {
  namespace: string;
  image: string;
  uid: number;
  gid: number;
  runtimeClassName?: string;
  /** Room on the node's disk beyond the workspace: the container's logs and writable layer. */
  ephemeralOverheadMb: number;
  /** The share of the run's CPU limit its pod requests, in percent (memory is requested in full). */
  cpuRequestPercent: number;
  /** The TCP port the runner listens on (the tcp transport); absent: the pod declares none. */
  runnerPort?: number;
  /** The run's own PersistentVolumeClaim as its workspace, instead of an `emptyDir` on the node. */
  workspaceClaim?: string;
}

/** The CPU a run's pod requests: a share of its limit, never below 10m (the scheduler's granularity is 1m). */
export function cpuRequestMillis(limitMillis: number, percent: number): number {
  return Math.min(limitMillis, Math.max(10, Math.round((limitMillis * percent) / 100)));
}

/** A pod name for a run: a DNS label, as Kubernetes requires. */
export function podName(runId: string): string {
  return `tether-${runId}`
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, '-')
    .slice(0, 63)
    .replace(/-+$/, '');
}

/** Whether a value may be a Kubernetes label value. */
export function isLabelValue(v: string): boolean {
  return v.length <= 63 && LABEL_VALUE.test(v);
}

/**
 * The run's pod, hardened to the Docker provider's bar: non-root, read-only root, no
 * capabilities, no privilege escalation, seccomp RuntimeDefault, no ServiceAccount token, no
 * Service links, limits from the run, a size-limited workspace and memory-backed /tmp and
 * home. The container's stdin stays open (`stdinOnce: false`): the boot line arrives there.
 */
export function runPod(spec: SandboxSpec, opts: PodOptions): V1Pod {
  const { limits } = spec;
  // Memory-backed like the Docker provider's tmpfs, and charged to the run's memory: a quarter
  // each keeps a full /tmp an ENOSPC for the writer rather than an OOM kill of the run.
  const scratchMb = Math.max(16, Math.floor(limits.memoryMb / 4));
  const diskMb = limits.diskMb ?? 0;
  // A claimed workspace is not on the node's disk: the ephemeral limit is the overhead alone.
  const nodeDiskMb = opts.workspaceClaim ? 0 : diskMb;
  const labels = selectorLabels(spec.labels);
  if (spec.labels[LABELS.pool] !== undefined) labels[POOL_STATE_LABEL] = 'starting';
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: podName(spec.runId),
      namespace: opts.namespace,
      labels,
      annotations: { [LABELS_ANNOTATION]: JSON.stringify(spec.labels), [BOOT_ID_ANNOTATION]: spec.runId },
    },
    spec: {
      restartPolicy: 'Never',
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      terminationGracePeriodSeconds: 2,
      runtimeClassName: opts.runtimeClassName || undefined,
      securityContext: podSecurity(opts.uid, opts.gid),
      containers: [
        {
          name: CONTAINER,
          image: opts.image,
          imagePullPolicy: 'IfNotPresent',
          stdin: true,
          stdinOnce: false,
          tty: false,
          // Only what the runner writes there, never its log: the status is readable by
          // whoever may read pods.
          terminationMessagePath: TERMINATION_MESSAGE_PATH,
          terminationMessagePolicy: 'File',
          workingDir: WORKSPACE,
          // Declared so that the runs' NetworkPolicy and a reader of the pod see what it serves.
          ...(opts.runnerPort
            ? { ports: [{ name: RUNNER_PORT_NAME, containerPort: opts.runnerPort, protocol: 'TCP' }] }
            : {}),
          env: [
            { name: 'TETHER_RUN_ID', value: spec.runId },
            { name: 'TETHER_WORKSPACE', value: WORKSPACE },
            { name: 'HOME', value: HOME },
            ...(spec.egress ? egressEnvironment(spec.egress).map(asEnv) : []),
          ],
          securityContext: containerSecurity(),
          resources: {
            // Memory is requested in full: it cannot be taken back from a run, only OOM-killed.
            // CPU can (it is throttled), and a run mostly idles while its agent thinks: requesting
            // all of its limit would keep a 2-core node to one run and a warm pool from filling.
            requests: {
              cpu: `${cpuRequestMillis(limits.cpuMillis, opts.cpuRequestPercent)}m`,
              memory: `${limits.memoryMb}Mi`,
              'ephemeral-storage': `${Math.min(nodeDiskMb, 64) + 16}Mi`,
            },
            limits: {
              cpu: `${limits.cpuMillis}m`,
              memory: `${limits.memoryMb}Mi`,
              'ephemeral-storage': `${nodeDiskMb + opts.ephemeralOverheadMb}Mi`,
            },
          },
          volumeMounts: [
            { name: 'workspace', mountPath: WORKSPACE },
            { name: 'tmp', mountPath: '/tmp' },
            { name: 'home', mountPath: HOME },
            { name: 'sockets', mountPath: SOCKET_DIR },
            ...(spec.egress ? [{ name: 'egress', mountPath: EGRESS_MOUNT }] : []),
          ],
        },
      ],
      volumes: [
        workspaceVolume(diskMb, opts.workspaceClaim),
        { name: 'tmp', emptyDir: { medium: 'Memory', sizeLimit: `${scratchMb}Mi` } },
        { name: 'home', emptyDir: { medium: 'Memory', sizeLimit: `${scratchMb}Mi` } },
        { name: 'sockets', emptyDir: { medium: 'Memory', sizeLimit: '1Mi' } },
        // Where the egress carrier, exec'd by a replica, listens for the runner's bridge.
        ...(spec.egress ? [{ name: 'egress', emptyDir: { medium: 'Memory', sizeLimit: '1Mi' } }] : []),
      ],
    },
  };
}

/** A run pod's, and every pod tether starts beside runs: the runs' user, never root, seccomp. */
export function podSecurity(uid: number, gid: number): V1PodSecurityContext {
  return {
    runAsNonRoot: true,
    runAsUser: uid,
    runAsGroup: gid,
    fsGroup: gid,
    seccompProfile: { type: 'RuntimeDefault' },
  };
}

/** No privilege, no capability, a read-only root (Pod Security `restricted`). */
export function containerSecurity(): V1SecurityContext {
  return {
    allowPrivilegeEscalation: false,
    readOnlyRootFilesystem: true,
    privileged: false,
    runAsNonRoot: true,
    capabilities: { drop: ['ALL'] },
    seccompProfile: { type: 'RuntimeDefault' },
  };
}

const asEnv = (line: string) => {
  const at = line.indexOf('=');
  return { name: line.slice(0, at), value: line.slice(at + 1) };
};

/** Whether a run's pod was made with egress: the runner's bridge is told where the carrier listens. */
export function hasEgress(pod: V1Pod): boolean {
  return !!pod.spec?.containers?.[0]?.env?.some((e) => e.name === 'TETHER_EGRESS_SOCKET');
}

/** The run labels a pod carries as Kubernetes labels (those whose value is a valid label value). */
export function selectorLabels(runLabels: Record<string, string>): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const key of SELECTOR_LABELS) {
    const v = runLabels[key];
    if (v !== undefined && isLabelValue(v)) labels[key] = v;
  }
  return labels;
}

/** The id a pod's runner secret is derived from. */
export function bootId(pod: V1Pod): string {
  return pod.metadata?.annotations?.[BOOT_ID_ANNOTATION] || pod.metadata?.labels?.[LABELS.runId] || '';
}

/** A pod's run labels, from its annotation (all of them) or else its Kubernetes labels. */
export function runLabels(pod: V1Pod): Record<string, string> {
  const raw = pod.metadata?.annotations?.[LABELS_ANNOTATION];
  if (raw) {
    try {
      const parsed = JSON.parse(raw) as unknown;
      if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) {
        const out: Record<string, string> = {};
        for (const [k, v] of Object.entries(parsed)) if (typeof v === 'string') out[k] = v;
        return out;
      }
    } catch {
      // a foreign or damaged annotation: fall back to the labels
    }
  }
  return { ...(pod.metadata?.labels ?? {}) };
}
