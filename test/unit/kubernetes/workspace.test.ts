import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { CoreV1Api, CoreV1Event, V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';
import { defaultConfig, loadConfig } from '../../../gateway/src/config';
import { runPod } from '../../../gateway/src/sandbox/kubernetes/podSpec';
import {
  claimName,
  unboundReason,
  WORKSPACE_VOLUME,
  FORK_COPY_LABEL,
  KEPT_LABEL,
  PAUSED_RUN_LABEL,
  WorkspaceClaims,
  workspaceClaim,
} from '../../../gateway/src/sandbox/kubernetes/workspaceVolume';
import { COPIER_LABEL, copierPod, WorkspaceCopier } from '../../../gateway/src/sandbox/kubernetes/workspaceCopy';
import { LABELS, type SandboxSpec } from '../../../gateway/src/sandbox/provider';

const spec: SandboxSpec = {
  runId: 'run-1',
  tenant: 'acme',
  labels: { [LABELS.managed]: 'true', [LABELS.instance]: 'default', [LABELS.runId]: 'run-1', [LABELS.tenant]: 'acme' },
  limits: { memoryMb: 1024, cpuMillis: 500, pids: 256, diskMb: 128 },
};
const opts = {
  namespace: 'runs',
  image: 'tether-runner:abc',
  uid: 1000,
  gid: 1000,
  ephemeralOverheadMb: 256,
  cpuRequestPercent: 10,
};
const storage = { storageClassName: 'fast-local', sizeMb: 2048, bindTimeoutSeconds: 30 };

function created(pod: V1Pod): V1Pod {
  return { ...pod, metadata: { ...pod.metadata, uid: '6f1e0c2a-0000-4000-8000-000000000001' } };
}

test('the workspace option is off by default: runs keep their emptyDir', () => {
  const ws = defaultConfig().kubernetes.workspace;
  assert.equal(ws.storageClassName, '');
  assert.equal(ws.sizeMb, 1024);
  assert.equal(ws.bindTimeoutSeconds, 60);
});

test('TETHER_K8S_WORKSPACE_CLASS sets the class; a name that cannot be a StorageClass is refused', () => {
  const env = { TETHER_TOKENS: 't=acme', TETHER_K8S_WORKSPACE_CLASS: 'fast-local' };
  assert.equal(loadConfig({ env }).kubernetes.workspace.storageClassName, 'fast-local');
  assert.throws(
    () => loadConfig({ env: { ...env, TETHER_K8S_WORKSPACE_CLASS: 'Not A Class' } }),
    /\/kubernetes\/workspace\/storageClassName must match pattern/,
  );
});

test('with a claim, the pod mounts it at /workspace and no workspace counts against node disk', () => {
  const pod = runPod(spec, { ...opts, workspaceClaim: claimName('tether-run-1') });
  const vol = pod.spec!.volumes!.find((v) => v.name === WORKSPACE_VOLUME)!;
  assert.deepEqual(vol, { name: 'workspace', persistentVolumeClaim: { claimName: 'tether-run-1-workspace' } });
  const c = pod.spec!.containers[0];
  assert.deepEqual(
    c.volumeMounts!.find((m) => m.name === WORKSPACE_VOLUME),
    { name: 'workspace', mountPath: '/workspace' },
  );
  // Only the writable layer and logs are on the node: the overhead, not diskMb + overhead.
  assert.equal(c.resources!.limits!['ephemeral-storage'], '256Mi');
  assert.equal(c.resources!.requests!['ephemeral-storage'], '16Mi');
});

test('without a claim, the workspace stays a size-limited emptyDir', () => {
  const pod = runPod(spec, opts);
  const vol = pod.spec!.volumes!.find((v) => v.name === WORKSPACE_VOLUME)!;
  assert.deepEqual(vol.emptyDir, { sizeLimit: '128Mi' });
  assert.equal(vol.persistentVolumeClaim, undefined);
  assert.equal(pod.spec!.containers[0].resources!.limits!['ephemeral-storage'], '384Mi');
});

test("a run's claim: its pod's labels, owned by the pod, ReadWriteOnce, the run's disk or the default size", () => {
  const pod = created(runPod(spec, { ...opts, workspaceClaim: claimName('tether-run-1') }));
  const claim = workspaceClaim(pod, 128, storage);
  assert.equal(claim.metadata!.name, 'tether-run-1-workspace');
  assert.equal(claim.metadata!.namespace, 'runs');
  assert.deepEqual(claim.metadata!.labels, pod.metadata!.labels);
  assert.equal(claim.metadata!.labels![LABELS.tenant], 'acme');
  assert.deepEqual(claim.metadata!.ownerReferences, [
    { apiVersion: 'v1', kind: 'Pod', name: 'tether-run-1', uid: '6f1e0c2a-0000-4000-8000-000000000001' },
  ]);
  assert.deepEqual(claim.spec!.accessModes, ['ReadWriteOnce']);
  assert.equal(claim.spec!.storageClassName, 'fast-local');
  assert.deepEqual(claim.spec!.resources!.requests, { storage: '128Mi' });
  assert.deepEqual(workspaceClaim(pod, 0, storage).spec!.resources!.requests, { storage: '2048Mi' });
  // The claim's labels are a copy: changing them leaves the pod's alone.
  claim.metadata!.labels!.x = 'y';
  assert.equal(pod.metadata!.labels!.x, undefined);
});

test('a claim is only made for a pod the API server has created (its owner needs a uid)', () => {
  const pod = runPod(spec, opts);
  assert.throws(() => workspaceClaim(pod, 128, storage), /needs its pod as created/);
});

test("an unbound claim's reason names its phase, its newest distinct events and the pod's scheduling", () => {
  const claim: V1PersistentVolumeClaim = { status: { phase: 'Pending' } };
  const ev = (reason: string, message: string, at: string): CoreV1Event => ({
    involvedObject: {},
    metadata: {},
    reason,
    message,
    lastTimestamp: new Date(at),
  });
  const pod: V1Pod = {
    status: {
      conditions: [
        {
          type: 'PodScheduled',
          status: 'False',
          message: '0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims.',
        },
      ],
    },
  };
  const why = unboundReason(
    claim,
    [
      ev('ProvisioningFailed', 'storageclass.storage.k8s.io "none" not found', '2026-01-01T00:00:01Z'),
      ev('ProvisioningFailed', 'storageclass.storage.k8s.io "none" not found', '2026-01-01T00:00:05Z'),
      ev('FailedBinding', 'no persistent volumes available for this claim', '2026-01-01T00:00:09Z'),
    ],
    pod,
  );
  assert.equal(
    why,
    'phase Pending; events: FailedBinding: no persistent volumes available for this claim | ProvisioningFailed: storageclass.storage.k8s.io "none" not found; pod: 0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims.',
  );
  assert.equal(unboundReason(undefined, [], undefined), 'phase unknown; no events');
});

test('the sweep deletes labelled claims whose owning pod is gone, listing claims before pods', async () => {
  const calls: string[] = [];
  const claim = (name: string, ownerUid?: string, deleting = false): V1PersistentVolumeClaim => ({
    metadata: {
      name,
      ownerReferences: ownerUid ? [{ apiVersion: 'v1', kind: 'Pod', name: 'p', uid: ownerUid }] : undefined,
      deletionTimestamp: deleting ? new Date() : undefined,
    },
  });
  const core = {
    listNamespacedPersistentVolumeClaim: async (ns: string, ...rest: unknown[]) => {
      calls.push(`list claims ${ns} ${rest[4]}`);
      return {
        body: {
          items: [
            claim('live', 'uid-live'),
            claim('orphan', 'uid-gone'),
            claim('ownerless'),
            claim('going', 'x', true),
          ],
        },
      };
    },
    listNamespacedPod: async (ns: string, ...rest: unknown[]) => {
      calls.push(`list pods ${ns} ${rest[4]}`);
      return { body: { items: [{ metadata: { uid: 'uid-live' } }] } };
    },
    deleteNamespacedPersistentVolumeClaim: async (name: string) => {
      calls.push(`delete ${name}`);
      if (name === 'ownerless') throw Object.assign(new Error('gone'), { statusCode: 404 });
      return { body: {} };
    },
  };
  const claims = new WorkspaceClaims(core as unknown as CoreV1Api, 'runs', storage);
  const removed = await claims.sweep('dev.tether.instance=a');
  assert.deepEqual(calls, [
    'list claims runs dev.tether.instance=a',
    'list pods runs dev.tether.instance=a',
    'delete orphan',
    'delete ownerless',
  ]);
  assert.equal(removed, 2);
});

test("a paused run's claim is kept past its pod: the sweep leaves it, by label or by name; a resume's pod owns it again", async () => {
  const patches: [string, unknown][] = [];
  const deleted: string[] = [];
  const core = {
    listNamespacedPersistentVolumeClaim: async () => ({
      body: {
        items: [
          { metadata: { name: 'labelled', labels: { [KEPT_LABEL]: 'true' } } },
          { metadata: { name: 'named' } },
          { metadata: { name: 'orphan' } },
        ],
      },
    }),
    listNamespacedPod: async () => ({ body: { items: [] } }),
    deleteNamespacedPersistentVolumeClaim: async (name: string) => {
      deleted.push(name);
      return { body: {} };
    },
    patchNamespacedPersistentVolumeClaim: async (name: string, _ns: string, body: unknown, ...rest: unknown[]) => {
      patches.push([name, body]);
      assert.deepEqual(rest[5], { headers: { 'Content-Type': 'application/merge-patch+json' } });
      return { body: {} };
    },
  };
  const claims = new WorkspaceClaims(core as unknown as CoreV1Api, 'runs', storage);
  assert.equal(await claims.sweep('x=y', new Set(['named'])), 1);
  assert.deepEqual(deleted, ['orphan']);
  await claims.keep('c');
  await claims.adopt('c', { metadata: { name: 'p2', uid: 'u2' } });
  assert.deepEqual(patches, [
    ['c', { metadata: { labels: { [KEPT_LABEL]: 'true' }, ownerReferences: null } }],
    [
      'c',
      {
        metadata: {
          labels: { [KEPT_LABEL]: null, [FORK_COPY_LABEL]: null },
          ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: 'p2', uid: 'u2' }],
        },
      },
    ],
  ]);
});

test("a fork's claim is kept from its making; the sweep takes it only when no paused record came to it within an hour", async () => {
  const created: V1PersistentVolumeClaim[] = [];
  const deleted: string[] = [];
  const hoursAgo = (h: number) => new Date(Date.now() - h * 3600_000);
  const fork = (name: string, age: number, extra: Record<string, string> = {}): V1PersistentVolumeClaim => ({
    metadata: {
      name,
      creationTimestamp: hoursAgo(age),
      labels: { [KEPT_LABEL]: 'true', [FORK_COPY_LABEL]: 'true', ...extra },
    },
  });
  const core = {
    createNamespacedPersistentVolumeClaim: async (_ns: string, claim: V1PersistentVolumeClaim) => {
      created.push(claim);
      return { body: claim };
    },
    listNamespacedPersistentVolumeClaim: async () => ({
      body: {
        items: [
          fork('copying', 0.1),
          fork('recorded', 5, { [PAUSED_RUN_LABEL]: 'run-9' }),
          fork('abandoned', 2),
          { metadata: { name: 'paused-long-ago', creationTimestamp: hoursAgo(9), labels: { [KEPT_LABEL]: 'true' } } },
        ],
      },
    }),
    listNamespacedPod: async () => ({ body: { items: [] } }),
    deleteNamespacedPersistentVolumeClaim: async (name: string) => {
      deleted.push(name);
      return { body: {} };
    },
  };
  const claims = new WorkspaceClaims(core as unknown as CoreV1Api, 'runs', storage);
  await claims.createKept('tether-run-2-workspace', { [LABELS.runId]: 'run-2' }, 0);
  assert.deepEqual(created[0].metadata?.labels, {
    [LABELS.runId]: 'run-2',
    [KEPT_LABEL]: 'true',
    [FORK_COPY_LABEL]: 'true',
  });
  assert.equal(created[0].metadata?.ownerReferences, undefined, 'no pod owns it yet');
  assert.equal(created[0].spec?.resources?.requests?.storage, '2048Mi');
  assert.equal(await claims.sweep('x=y'), 1);
  assert.deepEqual(deleted, ['abandoned']);
});

test("the copier pod: the runs' user and hardening, the source read-only, one mount per fork, not a run's pod", () => {
  const pod = copierPod(
    'tether-run-2-copy',
    'tether-run-1-workspace',
    ['tether-run-2-workspace', 'tether-run-3-workspace'],
    {
      namespace: 'runs',
      instance: 'default',
      image: 'tether-runner:abc',
      uid: 1000,
      gid: 1000,
      runtimeClassName: 'gvisor',
      deadlineSeconds: 600,
    },
  );
  // Without `dev.tether.managed`: the informer of the runs' pods never sees it.
  assert.deepEqual(pod.metadata?.labels, { [LABELS.instance]: 'default', [COPIER_LABEL]: 'true' });
  const spec = pod.spec!;
  assert.equal(spec.restartPolicy, 'Never');
  assert.equal(spec.activeDeadlineSeconds, 600);
  assert.equal(spec.automountServiceAccountToken, false);
  assert.equal(spec.runtimeClassName, 'gvisor');
  assert.equal(spec.securityContext?.runAsUser, 1000);
  const c = spec.containers[0];
  assert.equal(c.securityContext?.readOnlyRootFilesystem, true);
  assert.deepEqual(c.securityContext?.capabilities?.drop, ['ALL']);
  assert.equal(c.securityContext?.allowPrivilegeEscalation, false);
  assert.deepEqual(c.command?.slice(-2), ['/to/0', '/to/1']);
  assert.deepEqual(
    c.volumeMounts?.map((m) => [m.mountPath, m.readOnly ?? false]),
    [
      ['/from', true],
      ['/to/0', false],
      ['/to/1', false],
    ],
  );
  assert.deepEqual(
    spec.volumes?.map((v) => [v.persistentVolumeClaim?.claimName, v.persistentVolumeClaim?.readOnly ?? false]),
    [
      ['tether-run-1-workspace', true],
      ['tether-run-2-workspace', false],
      ['tether-run-3-workspace', false],
    ],
  );
});

test('a copy that failed says why from its status, and the copier is deleted either way', async () => {
  const calls: string[] = [];
  const core = {
    createNamespacedPod: async (_ns: string, pod: V1Pod) => {
      calls.push(`create ${pod.metadata?.name}`);
      return { body: pod };
    },
    readNamespacedPod: async () => ({
      body: {
        metadata: { name: 'c' },
        status: {
          phase: 'Failed',
          containerStatuses: [{ state: { terminated: { exitCode: 1, message: 'cp: No space left on device\n' } } }],
        },
      },
    }),
    deleteNamespacedPod: async (name: string) => {
      calls.push(`delete ${name}`);
      return { body: {} };
    },
  };
  const copier = new WorkspaceCopier(core as unknown as CoreV1Api, {
    namespace: 'runs',
    instance: 'default',
    uid: 1000,
    gid: 1000,
    deadlineSeconds: 600,
  });
  await assert.rejects(copier.copy('c', 'from', ['to'], 'img'), /exit code 1: cp: No space left on device$/);
  assert.deepEqual(calls, ['create c', 'delete c']);
});
