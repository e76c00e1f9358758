import type * as k8s from '@kubernetes/client-node';
import type { SharedRunRecords } from '../provider';
import { eventsAbout, eventTime } from './events';
import { bodyMessage, MERGE_PATCH, statusOf } from './apiErrors';

/** Where a run's workspace lives when `kubernetes.workspace.storageClassName` is set. */
export interface WorkspaceStorage {
  storageClassName: string;
  /** The claim's size when the run has no disk limit. */
  sizeMb: number;
  bindTimeoutSeconds: number;
}

export const WORKSPACE_VOLUME = 'workspace';

const POLL_MS = 250;
/** A fork's copy's time to get its paused record: the copy and the record take far less. */
const STALE_FORK_MS = 60 * 60 * 1000;

/**
 * On a claim a paused run keeps: no pod owns it, and no replica's sweep may take it for one
 * whose pod is gone. Taken off when a resumed run's pod owns it again.
 */
export const KEPT_LABEL = 'dev.tether.kept';

/** On a fork's workspace claim from its making until its pod adopts it. */
export const FORK_COPY_LABEL = 'dev.tether.fork-copy';

/** On a kept claim whose run is paused: the run's id (found by selector), and its paused record. */
export const PAUSED_RUN_LABEL = 'dev.tether.paused-run';
export const PAUSED_ANNOTATION = 'dev.tether.paused';

/** The run's claim: named after its pod, so each run has its own and finds it again by name. */
export function claimName(podName: string): string {
  return `${podName}-workspace`;
}

/** The pod's workspace volume: the run's claim, else an `emptyDir` limited to the run's disk. */
export function workspaceVolume(diskMb: number, claim?: string): k8s.V1Volume {
  if (claim) return { name: WORKSPACE_VOLUME, persistentVolumeClaim: { claimName: claim } };
  return { name: WORKSPACE_VOLUME, emptyDir: diskMb > 0 ? { sizeLimit: `${diskMb}Mi` } : {} };
}

/**
 * The claim for a pod that exists already: same labels, owned by the pod (by uid), so that
 * Kubernetes' garbage collector removes it with the pod whatever happens to the gateway. The
 * pod is created first for exactly that reason: an owner needs a uid, and a claim made before
 * its pod could only be given one by a later patch.
 */
export function workspaceClaim(pod: k8s.V1Pod, diskMb: number, storage: WorkspaceStorage): k8s.V1PersistentVolumeClaim {
  const name = pod.metadata?.name;
  const uid = pod.metadata?.uid;
  if (!name || !uid) throw new Error('a workspace claim needs its pod as created (name and uid)');
  const claim = claimOf(claimName(name), { ...(pod.metadata?.labels ?? {}) }, diskMb, storage);
  claim.metadata!.namespace = pod.metadata?.namespace;
  claim.metadata!.ownerReferences = [{ apiVersion: 'v1', kind: 'Pod', name, uid }];
  return claim;
}

/** A ReadWriteOnce claim of the class, of the run's disk or else the default size. */
function claimOf(
  name: string,
  labels: Record<string, string>,
  diskMb: number,
  storage: WorkspaceStorage,
): k8s.V1PersistentVolumeClaim {
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: { name, labels },
    spec: {
      accessModes: ['ReadWriteOnce'],
      storageClassName: storage.storageClassName,
      resources: { requests: { storage: `${diskMb > 0 ? diskMb : storage.sizeMb}Mi` } },
    },
  };
}

/** What the API server says about a claim that did not bind: its phase, its events, its pod's scheduling. */
export function unboundReason(
  claim: k8s.V1PersistentVolumeClaim | undefined,
  events: k8s.CoreV1Event[],
  pod: k8s.V1Pod | undefined,
): string {
  const parts = [`phase ${claim?.status?.phase ?? 'unknown'}`];
  const seen = new Set<string>();
  const said = events
    .slice()
    .sort((a, b) => eventTime(b) - eventTime(a))
    .map((e) => `${e.reason ?? 'Event'}: ${(e.message ?? '').trim()}`)
    .filter((m) => !seen.has(m) && seen.add(m))
    .slice(0, 3);
  parts.push(said.length ? `events: ${said.join(' | ')}` : 'no events');
  const scheduled = pod?.status?.conditions?.find((c) => c.type === 'PodScheduled' && c.status !== 'True');
  if (scheduled?.message) parts.push(`pod: ${scheduled.message.trim()}`);
  return parts.join('; ');
}

/**
 * A run's workspace claim through the API server: made after its pod, waited for until bound,
 * deleted with the run, and swept when a gateway starts (claims whose pod is gone). Needs
 * persistentvolumeclaims create/get/list/delete in the runs namespace.
 */
export class WorkspaceClaims {
  constructor(
    private readonly core: k8s.CoreV1Api,
    private readonly ns: string,
    readonly storage: WorkspaceStorage,
  ) {}

  async create(pod: k8s.V1Pod, diskMb: number): Promise<string> {
    const claim = workspaceClaim(pod, diskMb, this.storage);
    const name = claim.metadata!.name!;
    try {
      await this.core.createNamespacedPersistentVolumeClaim(this.ns, claim);
    } catch (err) {
      throw new Error(`could not create the workspace claim ${name}: ${bodyMessage(err)}`);
    }
    return name;
  }

  /**
   * A claim no pod owns yet, kept from the start (a fork's workspace, copied into before its
   * run's pod exists); the fork's pod adopts it like a resumed run's.
   */
  async createKept(name: string, labels: Record<string, string>, diskMb: number): Promise<void> {
    const claim = claimOf(name, { ...labels, [KEPT_LABEL]: 'true', [FORK_COPY_LABEL]: 'true' }, diskMb, this.storage);
    try {
      await this.core.createNamespacedPersistentVolumeClaim(this.ns, claim);
    } catch (err) {
      throw new Error(`could not create the workspace claim ${name}: ${bodyMessage(err)}`);
    }
  }

  /**
   * Until the claim is bound. The pod exists already: a class that binds on first use
   * (`WaitForFirstConsumer`) binds only once a pod using the claim is scheduled.
   */
  async waitBound(name: string, podName: string): Promise<void> {
    const timeoutMs = this.storage.bindTimeoutSeconds * 1000;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const claim = (await this.core.readNamespacedPersistentVolumeClaim(name, this.ns)).body;
      const phase = claim.status?.phase;
      if (phase === 'Bound') return;
      if (phase === 'Lost' || Date.now() > deadline) {
        const why = unboundReason(
          claim,
          await eventsAbout(this.core, this.ns, 'PersistentVolumeClaim', name),
          await this.pod(podName),
        );
        throw new Error(
          `the workspace claim ${name} (storageClassName "${this.storage.storageClassName}", ${claim.spec?.resources?.requests?.storage ?? '?'}) was not bound within ${this.storage.bindTimeoutSeconds} s: ${why}`,
        );
      }
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }

  /**
   * Lets the claim outlive its pod (a portable pause): the pod's ownership goes, so the garbage
   * collector leaves it when the pod is deleted, and the label tells every replica it is kept.
   */
  async keep(name: string): Promise<void> {
    await this.patchMetadata(name, { labels: { [KEPT_LABEL]: 'true' }, ownerReferences: null });
  }

  /** A kept claim becomes the workspace of a new pod (a resume): owned by it again, no longer kept. */
  async adopt(name: string, pod: k8s.V1Pod): Promise<void> {
    const owner = { apiVersion: 'v1', kind: 'Pod', name: pod.metadata!.name!, uid: pod.metadata!.uid! };
    await this.patchMetadata(name, {
      labels: { [KEPT_LABEL]: null, [FORK_COPY_LABEL]: null },
      ownerReferences: [owner],
    });
  }

  /** A JSON merge patch of the claim's metadata. */
  async patchMetadata(name: string, metadata: Record<string, unknown>): Promise<void> {
    try {
      await this.core.patchNamespacedPersistentVolumeClaim(
        name,
        this.ns,
        { metadata },
        undefined,
        undefined,
        undefined,
        undefined,
        undefined,
        MERGE_PATCH,
      );
    } catch (err) {
      if (statusOf(err) === 404) throw new Error(`the workspace claim ${name} is gone`);
      throw new Error(`could not update the workspace claim ${name}: ${bodyMessage(err)}`);
    }
  }

  async delete(name: string): Promise<void> {
    try {
      await this.core.deleteNamespacedPersistentVolumeClaim(name, this.ns);
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
    }
  }

  /**
   * Deletes the claims with these labels whose owning pod is gone (a gateway that died between
   * the two, a pod deleted past the gateway, a cluster without a garbage collector). Claims are
   * listed before pods: a claim is made only after its pod, so a claim in the first list whose
   * pod is missing from the second really has none, whatever other replicas create meanwhile.
   * Kept claims (a paused run's, by label or by name) are not leftovers, except a fork's copy
   * that got no paused record within `STALE_FORK_MS` (its replica died before writing it).
   */
  async sweep(selector: string, kept: ReadonlySet<string> = new Set()): Promise<number> {
    const claims = (
      await this.core.listNamespacedPersistentVolumeClaim(this.ns, undefined, undefined, undefined, undefined, selector)
    ).body.items;
    if (claims.length === 0) return 0;
    const pods = (await this.core.listNamespacedPod(this.ns, undefined, undefined, undefined, undefined, selector)).body
      .items;
    const live = new Set(pods.map((p) => p.metadata?.uid).filter(Boolean));
    let removed = 0;
    for (const claim of claims) {
      if (claim.metadata?.deletionTimestamp) continue;
      if (kept.has(claim.metadata!.name!)) continue;
      const labels = claim.metadata?.labels ?? {};
      if (labels[KEPT_LABEL] === 'true') {
        const age = Date.now() - new Date(claim.metadata?.creationTimestamp ?? Date.now()).getTime();
        if (!labels[FORK_COPY_LABEL] || labels[PAUSED_RUN_LABEL] || age < STALE_FORK_MS) continue;
      }
      const owner = claim.metadata?.ownerReferences?.find((o) => o.kind === 'Pod');
      if (owner && live.has(owner.uid)) continue;
      await this.delete(claim.metadata!.name!).then(() => removed++);
    }
    return removed;
  }

  private async pod(name: string): Promise<k8s.V1Pod | undefined> {
    try {
      return (await this.core.readNamespacedPod(name, this.ns)).body;
    } catch {
      return undefined;
    }
  }
}

/**
 * Paused runs' records, each on its run's kept claim (an annotation, and a label naming the run
 * so that a selector finds it): every replica of the instance reads them from the API server,
 * and a record goes with its claim when the run is deleted. Needs persistentvolumeclaims
 * list and patch, which the workspace claims need anyway.
 */
export class PausedOnClaims implements SharedRunRecords {
  constructor(
    private readonly core: k8s.CoreV1Api,
    private readonly ns: string,
    private readonly claims: WorkspaceClaims,
    /** The instance's label selector: another instance's records are not this one's. */
    private readonly selector: string,
  ) {}

  async write(runId: string, workspace: string, record: unknown): Promise<void> {
    await this.claims.patchMetadata(workspace, {
      labels: { [PAUSED_RUN_LABEL]: runId },
      annotations: { [PAUSED_ANNOTATION]: JSON.stringify(record) },
    });
  }

  async read(runId: string): Promise<unknown> {
    const [claim] = await this.claimsOf(runId);
    const text = claim?.metadata?.annotations?.[PAUSED_ANNOTATION];
    if (!text) return undefined;
    try {
      return JSON.parse(text);
    } catch {
      return undefined;
    }
  }

  async remove(runId: string): Promise<void> {
    for (const claim of await this.claimsOf(runId))
      await this.claims
        .patchMetadata(claim.metadata!.name!, {
          labels: { [PAUSED_RUN_LABEL]: null },
          annotations: { [PAUSED_ANNOTATION]: null },
        })
        .catch((err: Error) => {
          // A claim deleted meanwhile took its record with it.
          if (!/is gone$/.test(err.message)) throw err;
        });
  }

  async list(): Promise<string[]> {
    return (await this.claimsOf()).map((c) => c.metadata!.labels![PAUSED_RUN_LABEL]!);
  }

  private async claimsOf(runId?: string): Promise<k8s.V1PersistentVolumeClaim[]> {
    const selector = `${this.selector},${PAUSED_RUN_LABEL}${runId ? `=${runId}` : ''}`;
    return (
      await this.core.listNamespacedPersistentVolumeClaim(this.ns, undefined, undefined, undefined, undefined, selector)
    ).body.items.filter((c) => !c.metadata?.deletionTimestamp);
  }
}
