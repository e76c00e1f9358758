import type { V1ContainerStateTerminated, V1Pod } from '@kubernetes/client-node';
import { OOM_EXIT_CODE, OOM_MESSAGE_PREFIX } from '../../../../protocol/src/transport';
import type { SandboxExit } from '../provider';
import { CONTAINER } from './podSpec';

/**
 * Why a run's pod has ended, in the words Kubernetes gives, or undefined while it lives.
 * A pod being deleted counts as ended: its runner is about to be killed, and calls waiting
 * on it should not wait for the grace period.
 */
export function podExit(pod: V1Pod): SandboxExit | undefined {
  const status = pod.status ?? {};
  const container = status.containerStatuses?.find((c) => c.name === CONTAINER);
  const terminated =
    container?.state?.terminated ?? (status.phase === 'Failed' ? container?.lastState?.terminated : undefined);
  if (terminated) {
    const code = terminated.exitCode ?? null;
    const oom = oomDetail(pod, terminated);
    if (oom) return { reason: `${oom} (exit code ${code})`, oomKilled: true, exitCode: code, detail: oom };
    // An eviction names its cause on the pod (status, or the DisruptionTarget condition the
    // kubelet sets before it stops the container), not on the container.
    const cause = podCause(pod);
    const why = [terminated.reason, terminated.message].filter(Boolean).join(': ');
    return {
      reason: `${cause ? `${cause}; ` : ''}the runner exited with code ${code}${why ? ` (${why})` : ''}`,
      oomKilled: false,
      exitCode: code,
    };
  }
  if (status.reason === 'Evicted' || status.phase === 'Failed' || status.phase === 'Succeeded') {
    const why = [status.reason, status.message].filter(Boolean).join(': ');
    return {
      reason: `the pod ${status.phase === 'Succeeded' ? 'ended' : 'failed'}${why ? ` (${why})` : ''}`,
      oomKilled: false,
      exitCode: null,
    };
  }
  if (pod.metadata?.deletionTimestamp) {
    return { reason: `the pod was deleted (${deletionCause(pod)})`, oomKilled: false, exitCode: null };
  }
  return undefined;
}

/**
 * An OOM kill, in Kubernetes' word and the runner's account of it. Either the container was
 * killed (`OOMKilled`: the runner itself, or the whole container under cgroup v2's
 * `memory.oom.group`), or the runner saw another process of the run killed and ended the run
 * itself (`OOM_EXIT_CODE`), naming the victim in its termination message. Containerd also
 * reports `OOMKilled` then, having seen the kill in the container's cgroup.
 */
function oomDetail(pod: V1Pod, terminated: V1ContainerStateTerminated): string | undefined {
  const message = terminated.message?.trim() ?? '';
  if (terminated.exitCode === OOM_EXIT_CODE && message.startsWith(OOM_MESSAGE_PREFIX)) return message;
  if (terminated.reason !== 'OOMKilled' && terminated.exitCode !== OOM_EXIT_CODE) return undefined;
  const limit = pod.spec?.containers.find((c) => c.name === CONTAINER)?.resources?.limits?.memory;
  const at = `at its memory limit${limit ? ` (${limit})` : ''}`;
  if (terminated.exitCode === OOM_EXIT_CODE)
    return `${OOM_MESSAGE_PREFIX}: the runner ended the run after an OOM kill in it ${at}${message ? `: ${message}` : ''}`;
  return `${OOM_MESSAGE_PREFIX}: the run's container was killed ${at}${message ? ` (${message})` : ''}`;
}

/** What the pod's conditions say about its deletion: a taint eviction, a disruption, or a plain delete. */
function deletionCause(pod: V1Pod): string {
  return podCause(pod) ?? 'deleted through the API';
}

/** Why Kubernetes stopped the pod, when it says: an eviction's reason, or a disruption's. */
function podCause(pod: V1Pod): string | undefined {
  const status = pod.status ?? {};
  if (status.reason === 'Evicted') return `Evicted: ${status.message ?? 'no message'}`;
  const target = status.conditions?.find((c) => c.type === 'DisruptionTarget' && c.status === 'True');
  if (target) return [target.reason, target.message].filter(Boolean).join(': ');
  return undefined;
}

/** Why a pod that is not running yet cannot start, when Kubernetes already says it never will. */
export function startFailure(pod: V1Pod): string | undefined {
  const waiting = pod.status?.containerStatuses?.find((c) => c.name === CONTAINER)?.state?.waiting;
  const hopeless = [
    'ErrImageNeverPull',
    'InvalidImageName',
    'CreateContainerConfigError',
    'CreateContainerError',
    'ImagePullBackOff',
    'ErrImagePull',
  ];
  if (waiting?.reason && hopeless.includes(waiting.reason))
    return `${waiting.reason}${waiting.message ? `: ${waiting.message}` : ''}`;
  return undefined;
}
