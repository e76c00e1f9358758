/**
 * `kubernetes.transport: tcp` on the real test cluster. The provider creates the run's pod with
 * the runner's port declared and boots the runner listening on TCP as well as on its socket;
 * pods on this cluster have no address (a loopback-only CNI: `lo` and nothing else; the status
 * reports the loopback plugin's 127.0.0.1 and ::1, which from a replica are the replica itself), so no
 * replica could reach the runner, and CreateRun is refused FAILED_PRECONDITION with that reason,
 * the pod deleted and no run left behind. That a replica then reaches the runner over the pod's
 * network could not be tested here (test/integration/transport/tcp.test.ts covers the TCP
 * transport itself with a real runner on 127.0.0.1).
 */
import * as k8s from '@kubernetes/client-node';
import { status } from '@grpc/grpc-js';
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { defaultConfig } from '../../../gateway/src/config';
import { podName, RUNNER_PORT_NAME } from '../../../gateway/src/sandbox/kubernetes/podSpec';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { runnerImage } from '../docker/support';
import { adminConfig, adminConfigFile, deleteNamespace, runsNamespace, until } from './support';

const NS = `tether-runs-tcp${process.pid}`;
const kc = adminConfig();
const core = kc.makeApiClient(k8s.CoreV1Api);
const PORT = 7070;
let t: TestGateway;

before(async () => {
  await runsNamespace(core, NS);
  t = await startTestGateway({
    provider: 'kubernetes',
    kubernetes: {
      ...defaultConfig().kubernetes,
      namespace: NS,
      kubeconfig: adminConfigFile(),
      image: runnerImage(),
      transport: 'tcp',
      runnerPort: PORT,
    },
    limits: { default: { memoryMb: 512, cpuMillis: 500, pids: 256, diskMb: 64 } },
    runs: { startTimeoutSeconds: 120 },
  });
});

after(async () => {
  await t?.close();
  await deleteNamespace(core, NS);
});

/** Every version of the namespace's pods the API server reports while `during` runs. */
async function watchPods<T>(during: () => Promise<T>): Promise<{ result: PromiseSettledResult<T>; seen: k8s.V1Pod[] }> {
  const seen: k8s.V1Pod[] = [];
  const req = (await new k8s.Watch(kc).watch(
    `/api/v1/namespaces/${NS}/pods`,
    {},
    (_type: string, pod: k8s.V1Pod) => seen.push(pod),
    () => undefined,
  )) as { abort(): void };
  const [result] = await Promise.allSettled([during()]);
  // The deletion's events arrive a moment after the refusal.
  await until('the pod to be reported deleted', 30_000, async () =>
    seen.some((p) => p.metadata?.deletionTimestamp) ? true : undefined,
  );
  req.abort();
  return { result, seen };
}

test('tcp on a cluster whose pods have no address: the pod declares the port and its runner listens, CreateRun is FAILED_PRECONDITION with the reason, the pod is deleted', async () => {
  const { result, seen } = await watchPods(() => t.alice.createRun({ conversationId: 'tcp' }));
  assert.equal(result.status, 'rejected', 'CreateRun must be refused');
  const err = (result as PromiseRejectedResult).reason as { code: number; details: string };
  assert.equal(err.code, status.FAILED_PRECONDITION, err.details);
  assert.match(err.details, /pod tether-run-[0-9a-f-]+ has no address \(/);
  assert.match(err.details, /the cluster's pod network gave it none/);
  assert.match(err.details, /kubernetes\.transport 'tcp' needs pods with an address, use 'exec'/);
  // What the runner answered in its hello line, over the attach through the API server.
  assert.match(err.details, new RegExp(`its runner listens on 0\\.0\\.0\\.0:${PORT}\\)`));
  console.error(`CreateRun refused: ${err.details}`);

  const name = seen[0]?.metadata?.name ?? '';
  assert.match(name, /^tether-run-/);
  const runId = name.replace(/^tether-/, '');
  assert.equal(podName(runId), name);
  // The pod as the API server held it: the runner port declared, nothing of the host's network.
  for (const pod of seen) {
    const c = pod.spec!.containers[0];
    assert.deepEqual(
      c.ports?.map((p) => ({
        name: p.name,
        containerPort: p.containerPort,
        protocol: p.protocol,
        hostPort: p.hostPort,
      })),
      [{ name: RUNNER_PORT_NAME, containerPort: PORT, protocol: 'TCP', hostPort: undefined }],
    );
    assert.notEqual(pod.spec!.hostNetwork, true);
  }
  // It ran (the runner booted in it) and never had an address another pod could reach: the
  // loopback CNI plugin's 127.0.0.1 and ::1, if anything.
  const running = seen.filter((p) => p.status?.phase === 'Running');
  assert.ok(running.length > 0, 'the pod was Running');
  for (const pod of running) {
    const ips = [pod.status?.podIP, ...(pod.status?.podIPs ?? []).map((p) => p.ip)].filter(Boolean);
    for (const ip of ips) assert.match(ip!, /^(127\.\d+\.\d+\.\d+|::1)$/, `reported ${ip}`);
    if (ips.length) assert.match(err.details, new RegExp(`its status reports only ${ips[0]!.replace(/\./g, '\\.')}`));
  }
  assert.ok(
    running.some((p) => p.status?.containerStatuses?.find((s) => s.name === 'runner')?.state?.running),
    'the runner container was running',
  );

  // Nothing is left: the pod is gone from the API server, and the run from the gateway.
  await until('the pod to be gone', 60_000, async () => {
    const { body } = await core.listNamespacedPod(NS);
    return body.items.length === 0 ? true : undefined;
  });
  assert.deepEqual(await t.alice.listRuns(), []);
  await assert.rejects(t.alice.getRun(runId), (e: { code: number }) => e.code === status.NOT_FOUND);
});
