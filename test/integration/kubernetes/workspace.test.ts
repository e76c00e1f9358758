/**
 * A run's workspace on its own PersistentVolumeClaim (`kubernetes.workspace.storageClassName`),
 * on the real test cluster, with the gateway acting as the ServiceAccount the manifests define.
 * The cluster has no dynamic provisioner: the test makes a static hostPath PersistentVolume of
 * its own class (binding on first use, as local volumes do) in a host directory the run's user
 * may write, and a second class with no volume at all.
 */
import * as k8s from '@kubernetes/client-node';
import assert from 'node:assert/strict';
import {
  chownSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Approval, PauseDepth, RunState } from '@tether/contract';
import { resultText } from '../../../clients/typescript/src';
import { defaultConfig } from '../../../gateway/src/config';
import { diagnose } from '../../../gateway/src/doctor';
import { podName } from '../../../gateway/src/sandbox/kubernetes/podSpec';
import { claimName, KEPT_LABEL, PAUSED_ANNOTATION } from '../../../gateway/src/sandbox/kubernetes/workspaceVolume';
import { COPIER_LABEL } from '../../../gateway/src/sandbox/kubernetes/workspaceCopy';
import { LABELS } from '../../../gateway/src/sandbox/provider';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { runnerImage } from '../docker/support';
import {
  adminConfig,
  deleteNamespace,
  manifestObjects,
  runsNamespace,
  statusCode,
  tokenConfig,
  until,
} from './support';

const NS = `tether-pvc-t${process.pid}`;
const CLASS = `tether-hostpath-t${process.pid}`;
/** A class no volume has and no provisioner serves: its claims never bind. */
const NO_VOLUMES = `tether-novolume-t${process.pid}`;
/**
 * Eight volumes: a claim released from a `Retain` volume leaves it unbindable, and eight runs
 * bind one each (a paused run's claim binds once and keeps its volume across the pause; a fork's
 * binds when its copy is made).
 */
const PVS = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'].map((v) => `tether-ws-t${process.pid}-${v}`);
const kc = adminConfig();
const core = kc.makeApiClient(k8s.CoreV1Api);
const storageApi = kc.makeApiClient(k8s.StorageV1Api);
const rbacApi = kc.makeApiClient(k8s.RbacAuthorizationV1Api);
const tmp = mkdtempSync(path.join(os.tmpdir(), 'tether-pvc-'));
const hostDirs = PVS.map((_, i) => path.join(tmp, `volume-${i}`));
let gatewayKubeconfig = '';

const gone = (what: string, read: () => Promise<unknown>) =>
  until(`${what} to be gone`, 60_000, async () => {
    try {
      await read();
      return undefined;
    } catch (err) {
      if (statusCode(err) === 404) return true;
      throw err;
    }
  });

/** A manifest's Role (deploy/kubernetes, optional/ included). */
function manifestRole(name: string): k8s.V1Role {
  const role = manifestObjects().find((o) => o.kind === 'Role' && o.metadata?.name === name) as k8s.V1Role | undefined;
  assert.ok(role?.rules, `deploy/kubernetes has the Role ${name}`);
  return role;
}

/**
 * A kubeconfig file for a ServiceAccount in NS bound to the manifest's Role, with only these
 * rules kept, and `extra` rules beside them.
 */
async function serviceAccountKubeconfig(
  name: string,
  keep: (r: k8s.V1PolicyRule) => boolean,
  extra: k8s.V1PolicyRule[] = [],
): Promise<string> {
  const role = manifestRole('tether-gateway-runs');
  await core.createNamespacedServiceAccount(NS, { metadata: { name } });
  await rbacApi.createNamespacedRole(NS, { metadata: { name }, rules: [...role.rules!.filter(keep), ...extra] });
  await rbacApi.createNamespacedRoleBinding(NS, {
    metadata: { name },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
    subjects: [{ kind: 'ServiceAccount', name, namespace: NS }],
  });
  const token = await core.createNamespacedServiceAccountToken(name, NS, {
    apiVersion: 'authentication.k8s.io/v1',
    kind: 'TokenRequest',
    spec: { audiences: [], expirationSeconds: 3600 },
  });
  const file = path.join(tmp, `${name}.kubeconfig`);
  writeFileSync(file, tokenConfig(kc, token.body.status!.token).exportConfig(), { mode: 0o600 });
  return file;
}

function section(storageClassName: string, bindTimeoutSeconds: number) {
  return {
    ...defaultConfig().kubernetes,
    namespace: NS,
    kubeconfig: gatewayKubeconfig,
    image: runnerImage(),
    workspace: { storageClassName, sizeMb: 64, bindTimeoutSeconds },
  };
}

before(async () => {
  await runsNamespace(core, NS);
  gatewayKubeconfig = await serviceAccountKubeconfig('gateway', () => true);
  // hostPath volumes get no fsGroup ownership: the directory itself must be the run user's.
  for (const dir of hostDirs) {
    mkdirSync(dir, { mode: 0o750 });
    chownSync(dir, 1000, 1000);
  }
  await storageApi.createStorageClass({
    metadata: { name: CLASS },
    provisioner: 'kubernetes.io/no-provisioner',
    volumeBindingMode: 'WaitForFirstConsumer',
    reclaimPolicy: 'Retain',
  });
  for (const [i, name] of PVS.entries())
    await core.createPersistentVolume({
      metadata: { name },
      spec: {
        storageClassName: CLASS,
        capacity: { storage: '1Gi' },
        accessModes: ['ReadWriteOnce'],
        persistentVolumeReclaimPolicy: 'Retain',
        hostPath: { path: hostDirs[i], type: 'Directory' },
      },
    });
});

after(async () => {
  await deleteNamespace(core, NS);
  for (const pv of PVS) {
    await core.deletePersistentVolume(pv).catch(() => undefined);
    await gone(`PersistentVolume ${pv}`, () => core.readPersistentVolume(pv)).catch(() => undefined);
  }
  await storageApi.deleteStorageClass(CLASS).catch(() => undefined);
  rmSync(tmp, { recursive: true, force: true });
});

describe('a workspace on a static PersistentVolume', () => {
  let t: TestGateway;
  let runId = '';
  let hostDir = '';

  before(async () => {
    t = await startTestGateway({
      provider: 'kubernetes',
      kubernetes: section(CLASS, 120),
      limits: { default: { memoryMb: 1024, cpuMillis: 500, pids: 256, diskMb: 256 } },
      runs: { startTimeoutSeconds: 120 },
    });
  });

  after(async () => {
    if (runId) await t.alice.deleteRun(runId).catch(() => undefined);
    await t?.close();
  });

  it("CreateRun binds the run's own claim and the pod mounts it at /workspace", async () => {
    const run = await t.alice.createRun({ conversationId: 'pvc', approvals: { write: Approval.AUTO } });
    assert.equal(run.error, '');
    assert.equal(run.state, RunState.READY);
    runId = run.runId;
    const pod = (await core.readNamespacedPod(podName(runId), NS)).body;
    const claim = (await core.readNamespacedPersistentVolumeClaim(claimName(podName(runId)), NS)).body;
    assert.equal(claim.status?.phase, 'Bound');
    assert.ok(PVS.includes(claim.spec!.volumeName!), `bound to ${claim.spec?.volumeName}`);
    hostDir = hostDirs[PVS.indexOf(claim.spec!.volumeName!)];
    assert.equal(claim.spec?.storageClassName, CLASS);
    assert.deepEqual(claim.spec?.accessModes, ['ReadWriteOnce']);
    assert.equal(claim.spec?.resources?.requests?.storage, '256Mi', "the run's diskMb");
    assert.equal(claim.metadata?.labels?.[LABELS.runId], runId);
    assert.equal(claim.metadata?.labels?.[LABELS.tenant], 'alice');
    assert.equal(claim.metadata?.labels?.[LABELS.instance], t.config.instance);
    assert.deepEqual(
      claim.metadata?.ownerReferences?.map((o) => [o.kind, o.name, o.uid]),
      [['Pod', pod.metadata!.name, pod.metadata!.uid]],
    );
    const volume = pod.spec?.volumes?.find((v) => v.name === 'workspace');
    assert.equal(volume?.persistentVolumeClaim?.claimName, claim.metadata!.name);
    assert.ok(!volume?.persistentVolumeClaim?.readOnly);
    assert.equal(volume?.emptyDir, undefined);
    const mount = pod.spec?.containers[0].volumeMounts?.find((m) => m.name === 'workspace');
    assert.equal(mount?.mountPath, '/workspace');
    // The workspace is not on the node's disk: the ephemeral limit is the overhead alone.
    assert.equal(pod.spec?.containers[0].resources?.limits?.['ephemeral-storage'], '256Mi');
  });

  it('a write through the run lands in the volume on the host', async () => {
    const w = await t.alice.callTool(runId, 'write', { path: 'notes/hello.txt', content: 'through the claim\n' });
    assert.equal(w.result.isError, false, resultText(w.result));
    const file = path.join(hostDir, 'notes', 'hello.txt');
    assert.equal(readFileSync(file, 'utf8'), 'through the claim\n');
    assert.equal(statSync(file).uid, 1000);
    const r = await t.alice.callTool(runId, 'read', { path: 'notes/hello.txt' });
    assert.match(resultText(r.result), /through the claim/);
  });

  it('tether doctor: the Role of deploy/kubernetes suffices; without its claim rule, or the agent-sandbox Role where runs are claims, it names what is missing', async () => {
    const ok = (await diagnose(t.config)).find((c) => c.name === 'rbac');
    assert.equal(ok?.status, 'ok', ok?.detail);
    assert.match(ok!.detail, /persistentvolumeclaims/);
    const file = await serviceAccountKubeconfig(
      'no-claims',
      (r) => !(r.resources ?? []).includes('persistentvolumeclaims'),
    );
    const config = { ...t.config, kubernetes: { ...t.config.kubernetes, kubeconfig: file } };
    const bad = (await diagnose(config)).find((c) => c.name === 'rbac');
    assert.equal(bad?.status, 'fail');
    assert.match(
      bad!.detail,
      /create persistentvolumeclaims, get persistentvolumeclaims, list persistentvolumeclaims, delete persistentvolumeclaims, patch persistentvolumeclaims/,
    );
    // Without the option the same identity is enough.
    const plain = {
      ...config,
      kubernetes: { ...config.kubernetes, workspace: { ...config.kubernetes.workspace, storageClassName: '' } },
    };
    assert.equal((await diagnose(plain)).find((c) => c.name === 'rbac')?.status, 'ok');

    // Runs from agent-sandbox need its objects too: the gateway's identity here has the runs'
    // Role alone, and the optional Role adds them.
    const sandboxes = { ...t.config, kubernetes: { ...t.config.kubernetes, agentSandbox: true } };
    const lacking = (await diagnose(sandboxes)).find((c) => c.name === 'rbac');
    assert.equal(lacking?.status, 'fail');
    assert.match(lacking!.detail, /create sandboxclaims/);
    assert.match(lacking!.fix ?? '', /agent-sandbox-rbac\.yaml/);
    const both = await serviceAccountKubeconfig(
      'runs-and-sandboxes',
      () => true,
      manifestRole('tether-gateway-agent-sandbox').rules,
    );
    const enough = (await diagnose({ ...sandboxes, kubernetes: { ...sandboxes.kubernetes, kubeconfig: both } })).find(
      (c) => c.name === 'rbac',
    );
    assert.equal(enough?.status, 'ok', enough?.detail);
    assert.match(enough!.detail, /agent-sandbox/);
  });

  it('DeleteRun removes the pod and its claim; the volume keeps the data (Retain)', async () => {
    const pod = podName(runId);
    await t.alice.deleteRun(runId);
    await gone(`pod ${pod}`, () => core.readNamespacedPod(pod, NS));
    await gone(`claim ${claimName(pod)}`, () => core.readNamespacedPersistentVolumeClaim(claimName(pod), NS));
    runId = '';
    const volume = PVS[hostDirs.indexOf(hostDir)];
    const pv = await until('the volume to be released', 30_000, async () => {
      const { body } = await core.readPersistentVolume(volume);
      return body.status?.phase === 'Released' ? body : undefined;
    });
    assert.equal(pv.status?.phase, 'Released');
    assert.equal(readFileSync(path.join(hostDir, 'notes', 'hello.txt'), 'utf8'), 'through the claim\n');
  });

  it('a pod deleted behind the gateway: the garbage collector removes its claim (owner reference)', async () => {
    const run = await t.alice.createRun({ conversationId: 'pvc-gc' });
    assert.equal(run.state, RunState.READY, run.error);
    const pod = podName(run.runId);
    const claim = claimName(pod);
    assert.equal((await core.readNamespacedPersistentVolumeClaim(claim, NS)).body.status?.phase, 'Bound');
    await core.deleteNamespacedPod(pod, NS);
    const failed = await until('the run to be FAILED', 30_000, async () => {
      const r = await t.alice.getRun(run.runId);
      return r.state === RunState.FAILED ? r : undefined;
    });
    assert.match(failed.error, /pod was deleted/);
    // The gateway has not removed anything: the run is FAILED and kept until DeleteRun.
    await gone(`claim ${claim}`, () => core.readNamespacedPersistentVolumeClaim(claim, NS));
    await t.alice.deleteRun(run.runId);
  });
});

describe('a class with no volume', () => {
  const instance = `pvc-t${process.pid}`;
  const selector = `${LABELS.managed}=true,${LABELS.instance}=${instance}`;
  let t: TestGateway;

  before(async () => {
    // What a gateway on a cluster without a garbage collector could leave: a labelled claim
    // without its pod. The next gateway of the instance sweeps it; another instance's stays.
    const leftover = (name: string, inst: string): k8s.V1PersistentVolumeClaim => ({
      metadata: { name, labels: { [LABELS.managed]: 'true', [LABELS.instance]: inst } },
      spec: {
        accessModes: ['ReadWriteOnce'],
        storageClassName: NO_VOLUMES,
        resources: { requests: { storage: '16Mi' } },
      },
    });
    await core.createNamespacedPersistentVolumeClaim(NS, leftover('tether-leftover-workspace', instance));
    await core.createNamespacedPersistentVolumeClaim(NS, leftover('tether-other-workspace', `${instance}-other`));
    t = await startTestGateway({
      provider: 'kubernetes',
      instance,
      kubernetes: section(NO_VOLUMES, 5),
      limits: { default: { memoryMb: 1024, cpuMillis: 500, pids: 256, diskMb: 64 } },
      runs: { startTimeoutSeconds: 60 },
    });
  });

  after(async () => {
    await t?.close();
  });

  it("a gateway's start sweeps its instance's claims that have no pod", async () => {
    await gone('the leftover claim', () => core.readNamespacedPersistentVolumeClaim('tether-leftover-workspace', NS));
    const other = await core.readNamespacedPersistentVolumeClaim('tether-other-workspace', NS);
    assert.equal(other.body.metadata?.deletionTimestamp, undefined, "another instance's claim is left alone");
  });

  it('CreateRun fails naming the unbound claim and its events, and leaves neither pod nor claim', async () => {
    const t0 = Date.now();
    const run = await t.alice.createRun({ conversationId: 'pvc-unbound' });
    assert.equal(run.state, RunState.FAILED, run.error);
    assert.ok(Date.now() - t0 < 30_000, `failed after ${Date.now() - t0} ms`);
    const claim = claimName(podName(run.runId));
    assert.match(
      run.error,
      new RegExp(
        `the workspace claim ${claim} \\(storageClassName "${NO_VOLUMES}", 64Mi\\) was not bound within 5 s: phase Pending; events: `,
      ),
    );
    assert.match(run.error, new RegExp(`storageclass.storage.k8s.io "${NO_VOLUMES}" not found`));
    await until('no pod and no claim of the instance', 60_000, async () => {
      const pods = (await core.listNamespacedPod(NS, undefined, undefined, undefined, undefined, selector)).body.items;
      const claims = (
        await core.listNamespacedPersistentVolumeClaim(NS, undefined, undefined, undefined, undefined, selector)
      ).body.items;
      return pods.length === 0 && claims.length === 0 ? true : undefined;
    });
    await t.alice.deleteRun(run.runId).catch(() => undefined);
  });
});

describe('a paused run on its claim (portable depth)', () => {
  const instance = `pvc-pause-t${process.pid}`;
  const stateDir = mkdtempSync(path.join(tmp, 'state-'));
  let t: TestGateway;
  const start = (dir = stateDir) =>
    startTestGateway({
      provider: 'kubernetes',
      instance,
      stateDir: dir,
      kubernetes: section(CLASS, 120),
      limits: { default: { memoryMb: 1024, cpuMillis: 500, pids: 256, diskMb: 64 } },
      runs: { startTimeoutSeconds: 120, idlePauseSeconds: 0 },
    });

  before(async () => {
    t = await start();
  });
  after(async () => {
    await t?.close();
  });

  /** A READY run with a kernel, its writes approved. */
  const evalRun = async (conversationId: string) => {
    const run = await t.alice.createRun({
      conversationId,
      features: { eval: true },
      approvals: { write: Approval.AUTO },
    });
    assert.equal(run.state, RunState.READY, run.error);
    return run;
  };
  /** A cell through gateway `g` (a replica), which must not fail: its text. */
  const evalIn = async (g: TestGateway, runId: string, code: string) => {
    const r = await g.alice.callTool(runId, 'eval', { code, description: 'a kernel variable across pauses and forks' });
    assert.equal(r.result.isError, false, resultText(r.result));
    return resultText(r.result);
  };

  it('pause deletes the pod and keeps the claim; a restarted gateway resumes it on a new pod with the kernel variable', async () => {
    const run = await evalRun('pvc-pause');
    const pod = podName(run.runId);
    const claim = claimName(pod);
    const firstUid = (await core.readNamespacedPod(pod, NS)).body.metadata!.uid!;
    await t.alice.putFileMap(run.runId, { 'kept.txt': 'on the claim\n' });
    const cell = await t.alice.callTool(run.runId, 'eval', {
      code: 'answer = 6 * 7\nanswer',
      description: 'a variable the pause must keep',
    });
    assert.match(resultText(cell.result), /42/);

    const paused = await t.alice.pauseRun(run.runId);
    assert.equal(paused.state, RunState.PAUSED, paused.error);
    assert.equal(paused.pause?.depth, PauseDepth.PORTABLE);
    await assert.rejects(core.readNamespacedPod(pod, NS), (e) => statusCode(e) === 404, 'no pod of the run is left');
    const keptClaim = (await core.readNamespacedPersistentVolumeClaim(claim, NS)).body;
    assert.equal(keptClaim.status?.phase, 'Bound');
    assert.equal(keptClaim.metadata?.labels?.[KEPT_LABEL], 'true');
    assert.equal(keptClaim.metadata?.ownerReferences?.length ?? 0, 0, 'no pod owns the kept claim');

    // A restarted gateway sweeps claims without a pod at start: a kept one is not among them.
    await t.close();
    t = await start();
    assert.equal((await t.alice.getRun(run.runId)).state, RunState.PAUSED);
    assert.equal(
      (await core.readNamespacedPersistentVolumeClaim(claim, NS)).body.metadata?.deletionTimestamp,
      undefined,
    );

    const resumed = await t.alice.callTool(run.runId, 'eval', {
      code: 'answer + 1',
      description: 'the variable after a resume on a new pod',
    });
    assert.equal(resumed.result.isError, false, resultText(resumed.result));
    assert.match(resultText(resumed.result), /43/);
    const newPod = (await core.readNamespacedPod(pod, NS)).body;
    assert.notEqual(newPod.metadata!.uid, firstUid, 'a new pod');
    const owned = (await core.readNamespacedPersistentVolumeClaim(claim, NS)).body;
    assert.deepEqual(
      owned.metadata?.ownerReferences?.map((o) => o.uid),
      [newPod.metadata!.uid],
    );
    assert.equal(owned.metadata?.labels?.[KEPT_LABEL], undefined);
    const files = await t.alice.getFileMap(run.runId, 'kept.txt');
    assert.equal(files['kept.txt']?.toString(), 'on the claim\n');

    await t.alice.deleteRun(run.runId);
    await gone(`claim ${claim}`, () => core.readNamespacedPersistentVolumeClaim(claim, NS));
  });

  it('any replica resumes a run another paused: the record is on the claim, not in a state directory', async () => {
    const run = await evalRun('pvc-replicas');
    const claim = claimName(podName(run.runId));
    assert.match(await evalIn(t, run.runId, 'answer = 6 * 7\nanswer'), /42/);
    // A second replica of the instance: its own state directory, only the transport key shared
    // (in a cluster, the Secret every replica mounts).
    const otherState = mkdtempSync(path.join(tmp, 'state-'));
    copyFileSync(path.join(stateDir, 'transport.key'), path.join(otherState, 'transport.key'));
    const other = await start(otherState);
    const stateOn = (g: TestGateway) => g.alice.getRun(run.runId).then((r) => r.state);
    try {
      await until('the other replica to know the run', 30_000, async () =>
        (await stateOn(other).catch(() => undefined)) === RunState.READY ? true : undefined,
      );

      // Paused through the first: the record is on the claim, and the other replica reads it.
      assert.equal((await t.alice.pauseRun(run.runId)).state, RunState.PAUSED);
      const record = (await core.readNamespacedPersistentVolumeClaim(claim, NS)).body.metadata?.annotations?.[
        PAUSED_ANNOTATION
      ];
      assert.equal(JSON.parse(record ?? '{}').runId, run.runId, 'the paused record is on the claim');
      assert.equal(existsSync(path.join(stateDir, 'paused')), false, 'and not in the state directory');
      await until('the other replica to see it paused', 30_000, async () =>
        (await stateOn(other)) === RunState.PAUSED ? true : undefined,
      );

      // A call through the other replica resumes it with the kernel variable; the first takes it up.
      assert.match(await evalIn(other, run.runId, 'answer + 1'), /43/);
      await until('the first replica to see it resumed', 30_000, async () =>
        (await stateOn(t)) === RunState.READY ? true : undefined,
      );
      assert.match(await evalIn(t, run.runId, 'answer + 2'), /44/);
      const annotations = (await core.readNamespacedPersistentVolumeClaim(claim, NS)).body.metadata?.annotations;
      assert.equal(annotations?.[PAUSED_ANNOTATION], undefined, 'a resumed run has no paused record');

      // Paused through the other, deleted through the first: the other forgets it from the records.
      assert.equal((await other.alice.pauseRun(run.runId)).state, RunState.PAUSED);
      await until('the first replica to see it paused', 30_000, async () =>
        (await stateOn(t)) === RunState.PAUSED ? true : undefined,
      );
      await t.alice.deleteRun(run.runId);
      await until('the other replica to forget it', 30_000, async () =>
        (await stateOn(other).catch((e: { code: number }) => e.code)) === 5 ? true : undefined,
      );
      await gone(`claim ${claim}`, () => core.readNamespacedPersistentVolumeClaim(claim, NS));
    } finally {
      await other.close();
      await t.alice.deleteRun(run.runId).catch(() => undefined);
    }
  });

  it('forks: each on its own claim copied from the parent (live or paused), with the kernel variable; a write in one is seen by no other', async () => {
    const parent = await evalRun('pvc-fork');
    await t.alice.putFileMap(parent.runId, { 'shared.txt': 'from the parent\n' });
    assert.match(await evalIn(t, parent.runId, 'seed = [n * 3 for n in range(10)]\nseed[-1]'), /27/);
    await assert.rejects(t.bob.forkRun(parent.runId, 2), (e: { code: number }) => e.code === 5);

    const forks = await t.alice.forkRun(parent.runId, 2);
    assert.equal(forks.length, 2);
    const claims = new Set([claimName(podName(parent.runId))]);
    for (const f of forks) {
      assert.equal(f.state, RunState.READY, f.error);
      assert.equal(f.forkedFrom, parent.runId);
      const first = await t.alice.callTool(f.runId, 'eval', {
        code: 'seed[-1]',
        description: 'the variable in a fork',
      });
      assert.match(resultText(first.result), /27/);
      assert.match(resultText(first.result), new RegExp(`fork of run ${parent.runId}`));
      // Its own claim, owned by its own pod, bound to a volume of its own.
      const pod = (await core.readNamespacedPod(podName(f.runId), NS)).body;
      const claim = (await core.readNamespacedPersistentVolumeClaim(claimName(podName(f.runId)), NS)).body;
      assert.equal(claim.status?.phase, 'Bound');
      assert.deepEqual(
        claim.metadata?.ownerReferences?.map((o) => o.uid),
        [pod.metadata!.uid],
      );
      assert.equal(claim.metadata?.labels?.[KEPT_LABEL], undefined);
      claims.add(claim.metadata!.name!);
    }
    assert.equal(claims.size, 3, 'three claims: the parent and each fork');
    const copiers = await core.listNamespacedPod(NS, undefined, undefined, undefined, undefined, COPIER_LABEL);
    assert.equal(copiers.body.items.length, 0, 'no copier pod is left');

    const [a, b] = forks as [(typeof forks)[0], (typeof forks)[0]];
    await t.alice.putFileMap(a.runId, { 'shared.txt': 'changed in fork a\n', 'only-a.txt': 'a\n' });
    assert.match(await evalIn(t, a.runId, 'seed.append(99)\nlen(seed)'), /11/);
    for (const other of [parent.runId, b.runId]) {
      const files = await t.alice.getFileMap(other, '');
      assert.equal(files['shared.txt']?.toString(), 'from the parent\n', other);
      assert.equal(files['only-a.txt'], undefined, other);
      assert.match(await evalIn(t, other, 'len(seed)'), /10/);
    }
    assert.equal((await t.alice.getRun(parent.runId)).state, RunState.READY);

    // A paused parent is forked from its kept claim, with no pod of its own, and stays paused.
    assert.equal((await t.alice.pauseRun(parent.runId)).state, RunState.PAUSED);
    const [c] = await t.alice.forkRun(parent.runId, 1);
    assert.equal(c.state, RunState.READY, c.error);
    assert.match(await evalIn(t, c.runId, 'len(seed)'), /10/);
    assert.equal((await t.alice.getRun(parent.runId)).state, RunState.PAUSED);
    claims.add(claimName(podName(c.runId)));

    for (const id of [parent.runId, a.runId, b.runId, c.runId]) await t.alice.deleteRun(id);
    for (const claim of claims) await gone(`claim ${claim}`, () => core.readNamespacedPersistentVolumeClaim(claim, NS));
  });

  it('a run on an emptyDir workspace cannot be paused, and says why', async () => {
    const plain = await startTestGateway({
      provider: 'kubernetes',
      kubernetes: { ...section(CLASS, 120), workspace: { storageClassName: '', sizeMb: 64, bindTimeoutSeconds: 5 } },
      limits: { default: { memoryMb: 1024, cpuMillis: 500, pids: 256, diskMb: 64 } },
      runs: { startTimeoutSeconds: 120 },
    });
    try {
      const run = await plain.alice.createRun({ conversationId: 'pvc-none' });
      assert.equal(run.state, RunState.READY, run.error);
      await assert.rejects(plain.alice.pauseRun(run.runId), (e: { code: number; details: string }) => {
        assert.equal(e.code, 9, e.details);
        assert.match(e.details, /emptyDir/);
        return true;
      });
      assert.equal((await plain.alice.getRun(run.runId)).state, RunState.READY, 'the run goes on');
      await plain.alice.deleteRun(run.runId);
    } finally {
      await plain.close();
    }
  });
});
