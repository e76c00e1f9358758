import type * as k8s from '@kubernetes/client-node';

/**
 * The Events about one object, for the words Kubernetes gives where the object's status does
 * not (an eviction's cause, why a claim is not bound). None when they cannot be read: they only
 * ever add to a reason.
 */
export async function eventsAbout(
  core: k8s.CoreV1Api,
  ns: string,
  kind: 'Pod' | 'PersistentVolumeClaim',
  name: string,
): Promise<k8s.CoreV1Event[]> {
  try {
    const selector = `involvedObject.kind=${kind},involvedObject.name=${name}`;
    // The last argument is the server's time limit (2 s): a reason is never held up for long.
    const u = undefined;
    const { body } = await core.listNamespacedEvent(ns, u, u, u, selector, u, u, u, u, u, 2);
    return body.items;
  } catch {
    return [];
  }
}

/** When an Event last happened, for the newest first. */
export const eventTime = (e: k8s.CoreV1Event) =>
  new Date(e.lastTimestamp ?? e.eventTime ?? e.metadata?.creationTimestamp ?? 0).getTime();
