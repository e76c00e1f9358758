import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { LABELS, type SandboxSpec } from '../../../gateway/src/sandbox/provider';
import { podExit, startFailure } from '../../../gateway/src/sandbox/kubernetes/podExit';
import { LABELS_ANNOTATION, podName, runLabels, runPod } from '../../../gateway/src/sandbox/kubernetes/podSpec';

const spec: SandboxSpec = {
  runId: 'run-0f4c2a9e-1b2c-4d5e-8f90-123456789abc',
  tenant: 'acme',
  labels: {
    [LABELS.managed]: 'true',
    [LABELS.instance]: 'default',
    [LABELS.runId]: 'run-0f4c2a9e-1b2c-4d5e-8f90-123456789abc',
    [LABELS.tenant]: 'acme',
    [LABELS.spec]: Buffer.from(JSON.stringify({ long: 'x'.repeat(200) })).toString('base64'),
    team: 'a value with spaces, not a Kubernetes label value',
  },
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

test('a run pod is hardened and limited as the run asks', () => {
  const pod = runPod(spec, { ...opts, runtimeClassName: 'gvisor' });
  const c = pod.spec!.containers[0];
  assert.equal(pod.metadata!.name, 'tether-run-0f4c2a9e-1b2c-4d5e-8f90-123456789abc');
  assert.equal(pod.spec!.automountServiceAccountToken, false);
  assert.equal(pod.spec!.enableServiceLinks, false);
  assert.equal(pod.spec!.runtimeClassName, 'gvisor');
  assert.equal(pod.spec!.securityContext!.runAsNonRoot, true);
  assert.equal(pod.spec!.securityContext!.seccompProfile!.type, 'RuntimeDefault');
  assert.deepEqual(c.securityContext!.capabilities, { drop: ['ALL'] });
  assert.equal(c.securityContext!.readOnlyRootFilesystem, true);
  assert.equal(c.securityContext!.allowPrivilegeEscalation, false);
  assert.deepEqual(c.resources!.limits, { cpu: '500m', memory: '1024Mi', 'ephemeral-storage': '384Mi' });
  // CPU is requested as a share of the limit (a node holds more than its cores' worth of idle runs); memory in full.
  assert.equal(c.resources!.requests!.cpu, '50m');
  assert.equal(c.resources!.requests!.memory, '1024Mi');
  assert.equal(c.stdin, true);
  assert.equal(c.stdinOnce, false);
  const vols = Object.fromEntries(pod.spec!.volumes!.map((v) => [v.name, v.emptyDir]));
  assert.deepEqual(vols.workspace, { sizeLimit: '128Mi' });
  assert.deepEqual(vols.tmp, { medium: 'Memory', sizeLimit: '256Mi' });
  assert.ok(!c.env!.some((e) => /secret/i.test(e.name)), 'no secret in the environment');
});

test('only valid label values become Kubernetes labels; every label is kept in the annotation', () => {
  const pod = runPod(spec, opts);
  assert.deepEqual(
    Object.keys(pod.metadata!.labels!).sort(),
    [LABELS.instance, LABELS.managed, LABELS.runId, LABELS.tenant].sort(),
  );
  assert.deepEqual(runLabels(pod), spec.labels);
  assert.deepEqual(runLabels({ metadata: { labels: { a: 'b' }, annotations: { [LABELS_ANNOTATION]: '{oops' } } }), {
    a: 'b',
  });
  assert.equal(podName('Run_X'), 'tether-run-x');
});

const running = (extra: Partial<V1Pod['status']> = {}): V1Pod => ({
  metadata: { name: 'p' },
  status: {
    phase: 'Running',
    containerStatuses: [
      { name: 'runner', ready: true, restartCount: 0, image: '', imageID: '', state: { running: {} } },
    ],
    ...extra,
  },
});

test('why a pod ended, in Kubernetes words', () => {
  assert.equal(podExit(running()), undefined);
  const oom = podExit({
    status: {
      phase: 'Failed',
      containerStatuses: [
        {
          name: 'runner',
          ready: false,
          restartCount: 0,
          image: '',
          imageID: '',
          state: { terminated: { exitCode: 137, reason: 'OOMKilled' } },
        },
      ],
    },
  });
  assert.equal(oom?.oomKilled, true);
  assert.match(oom!.reason, /OOMKilled/);
  const evicted = podExit({
    status: {
      phase: 'Failed',
      reason: 'Evicted',
      message: 'Usage of EmptyDir volume "workspace" exceeds the limit "32Mi".',
    },
  });
  assert.match(evicted!.reason, /Evicted: Usage of EmptyDir volume "workspace" exceeds the limit/);
  const deleted = podExit({ ...running(), metadata: { deletionTimestamp: new Date() } });
  assert.match(deleted!.reason, /deleted/);
  const tainted = podExit({
    metadata: { deletionTimestamp: new Date() },
    status: {
      phase: 'Running',
      conditions: [
        {
          type: 'DisruptionTarget',
          status: 'True',
          reason: 'DeletionByTaintManager',
          message: 'Taint manager: deleting due to NoExecute taint',
        },
      ],
    },
  });
  assert.match(tainted!.reason, /DeletionByTaintManager/);
});

const ended = (terminated: { exitCode: number; reason?: string; message?: string }): V1Pod => ({
  spec: { containers: [{ name: 'runner', resources: { limits: { memory: '512Mi' } } }] },
  status: {
    phase: 'Failed',
    containerStatuses: [
      { name: 'runner', ready: false, restartCount: 0, image: '', imageID: '', state: { terminated } },
    ],
  },
});

test('an OOM kill: the runner killed, or the runner ending the run for a kill in it, named', () => {
  const victim = "OOMKilled: the eval kernel (python, pid 57) was killed at the run's memory limit (512Mi)";
  // containerd saw the kill in the container's cgroup (OOMKilled) and the runner named it.
  for (const reason of ['OOMKilled', 'Error']) {
    const exit = podExit(ended({ exitCode: 86, reason, message: `${victim}\n` }));
    assert.equal(exit?.oomKilled, true, reason);
    assert.equal(exit?.detail, victim);
    assert.equal(exit?.reason, `${victim} (exit code 86)`);
    assert.equal(exit?.exitCode, 86);
  }
  // The runner itself killed (or the whole container, cgroup v2's memory.oom.group).
  const runner = podExit(ended({ exitCode: 137, reason: 'OOMKilled' }));
  assert.equal(runner?.oomKilled, true);
  assert.equal(runner?.detail, "OOMKilled: the run's container was killed at its memory limit (512Mi)");
  // The runner's code without its message (the file could not be written): still an OOM kill.
  const silent = podExit(ended({ exitCode: 86, reason: 'Error' }));
  assert.equal(silent?.oomKilled, true);
  assert.match(
    silent!.detail!,
    /^OOMKilled: the runner ended the run after an OOM kill in it at its memory limit \(512Mi\)$/,
  );
  // Another exit with a message is not an OOM kill, and keeps Kubernetes' words.
  const other = podExit(ended({ exitCode: 1, reason: 'Error', message: 'OOMKilled: not from the runner' }));
  assert.equal(other?.oomKilled, false);
  assert.match(other!.reason, /exited with code 1 \(Error: OOMKilled: not from the runner\)/);
});

test('the pod asks for the termination message from its file only', () => {
  const c = runPod(spec, opts).spec!.containers[0];
  assert.equal(c.terminationMessagePath, '/dev/termination-log');
  assert.equal(c.terminationMessagePolicy, 'File');
});

test('a pod that can never start says why at once', () => {
  const pod: V1Pod = {
    status: {
      phase: 'Pending',
      containerStatuses: [
        {
          name: 'runner',
          ready: false,
          restartCount: 0,
          image: '',
          imageID: '',
          state: { waiting: { reason: 'ErrImageNeverPull', message: 'image not present' } },
        },
      ],
    },
  };
  assert.match(startFailure(pod)!, /ErrImageNeverPull: image not present/);
  assert.equal(startFailure(running()), undefined);
});
