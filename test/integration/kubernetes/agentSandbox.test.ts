/**
 * Runs as kubernetes-sigs/agent-sandbox objects, on the project's cluster with agent-sandbox's
 * own controller (built from its Go module by scripts/cluster.sh): the gateway keeps a
 * SandboxTemplate of its hardened run pod and a SandboxWarmPool; a CreateRun is a SandboxClaim
 * bound to a warm pod, which tether then serves as any run pod; DeleteRun deletes the claim
 * and agent-sandbox removes the pod; the warm pool refills.
 */
import * as k8s from '@kubernetes/client-node';
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Approval, RunStart, RunState } from '@tether/contract';
import { resultText } from '../../../clients/typescript/src';
import { defaultConfig } from '../../../gateway/src/config';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { fixture as lspFixture } from '../lsp/helpers';
import { runnerImage } from '../docker/support';
import { adminConfig, adminConfigFile, deleteNamespace, runsNamespace, until } from './support';

const NS = `tether-runs-a${process.pid}`;
const admin = adminConfig();
const core = admin.makeApiClient(k8s.CoreV1Api);
const custom = admin.makeApiClient(k8s.CustomObjectsApi);
const net = admin.makeApiClient(k8s.NetworkingV1Api);
const GROUP = 'extensions.agents.x-k8s.io';
const WARM = 2;
const instance = `as-${process.pid}`;
const NAME = `tether-${instance}`;
let t: TestGateway;

interface Pool {
  status?: { readyReplicas?: number };
}
interface Claim {
  metadata: { name: string; labels?: Record<string, string> };
  status?: { sandbox?: { name?: string } };
}

function serve(stateDir?: string): Promise<TestGateway> {
  return startTestGateway({
    provider: 'kubernetes',
    instance,
    ...(stateDir ? { stateDir } : {}),
    kubernetes: {
      ...defaultConfig().kubernetes,
      namespace: NS,
      kubeconfig: adminConfigFile(),
      image: runnerImage(),
      agentSandbox: true,
    },
    limits: { default: { memoryMb: 1024, cpuMillis: 1000, pids: 512, diskMb: 256 } },
    pool: { size: WARM, maxTotal: WARM, maxMemoryMb: 8192, concurrency: 2, templates: {} },
    runs: { startTimeoutSeconds: 120 },
  });
}

before(async () => {
  await runsNamespace(core, NS);
  t = await serve();
});

after(async () => {
  await t?.close();
  await deleteNamespace(core, NS);
});

const warmReady = async () =>
  ((await custom.getNamespacedCustomObject(GROUP, 'v1beta1', NS, 'sandboxwarmpools', NAME)).body as Pool).status
    ?.readyReplicas ?? 0;

const claims = async () =>
  ((await custom.listNamespacedCustomObject(GROUP, 'v1beta1', NS, 'sandboxclaims')).body as { items: Claim[] }).items;

test('a run is a SandboxClaim bound to a warm agent-sandbox pod, served like any run; its deletion removes claim and pod', async () => {
  // The gateway makes the template and the pool when it starts.
  await until(`${WARM} warm sandboxes`, 240_000, async () => ((await warmReady()) >= WARM ? true : undefined));

  const run = await t.alice.createRun({
    conversationId: 'as-warm',
    features: { lsp: true, eval: true },
    approvals: { write: Approval.AUTO, exec: Approval.AUTO },
  });
  assert.equal(run.state, RunState.READY, run.error);
  assert.equal(run.start, RunStart.COLD, 'tether reports no pool of its own: the warm pod is agent-sandbox’s');
  const claim = (await claims()).find((c) => c.metadata.labels?.['dev.tether.run-id'] === run.runId);
  assert.ok(claim, 'a SandboxClaim carries the run');
  const podName = claim.status?.sandbox?.name;
  assert.ok(podName?.startsWith(`${NAME}-`), `the run's pod came from the warm pool: ${podName}`);

  const pod = (await core.readNamespacedPod(podName!, NS)).body;
  assert.equal(pod.metadata?.labels?.['dev.tether.run-id'], run.runId);
  assert.equal(pod.metadata?.annotations?.['dev.tether.sandbox-claim'], claim.metadata.name);
  // What tether keeps stricter than agent-sandbox's defaults: its own hardened pod spec.
  const c = pod.spec!.containers[0];
  assert.equal(pod.spec!.automountServiceAccountToken, false);
  assert.equal(pod.spec!.securityContext?.runAsNonRoot, true);
  assert.equal(c.securityContext?.readOnlyRootFilesystem, true);
  assert.deepEqual(c.securityContext?.capabilities?.drop, ['ALL']);
  const policy = (await net.readNamespacedNetworkPolicy(`${NAME}-network-policy`, NS)).body;
  assert.deepEqual(policy.spec?.egress ?? [], [], 'the template denies all egress');
  assert.deepEqual(policy.spec?.ingress ?? [], [], 'and all ingress');

  await t.alice.putFileMap(run.runId, lspFixture('py'));
  const definition = await t.alice.callTool(
    run.runId,
    'lsp',
    { action: 'definition', file: 'geometry/main.py', line: 3, symbol: 'Circle' },
    { deadlineMs: 120_000 },
  );
  assert.equal(definition.result.isError, false, resultText(definition.result));
  assert.match(resultText(definition.result), /geometry\/shapes\.py:11: class Circle\(Shape\):/);
  const cell = await t.alice.callTool(
    run.runId,
    'eval',
    { code: 'kept = 6 * 7\nkept', description: 'a cell in a claimed sandbox' },
    { deadlineMs: 120_000 },
  );
  assert.equal(cell.result.isError, false, resultText(cell.result));
  assert.match(resultText(cell.result), /42/);

  // A restarted gateway (the runs stay: the provider keeps them on shutdown) finds the run again.
  const stateDir = t.config.stateDir;
  await t.close();
  t = await serve(stateDir);
  await until('the run to be recovered', 60_000, async () =>
    (await t.alice.getRun(run.runId).catch(() => undefined))?.state === RunState.READY ? true : undefined,
  );
  const again = await t.alice.callTool(
    run.runId,
    'eval',
    { code: 'kept', description: 'the same kernel after the gateway restarted' },
    { deadlineMs: 120_000 },
  );
  assert.match(resultText(again.result), /42/);

  await t.alice.deleteRun(run.runId);
  await until('the claim and its pod to be gone', 60_000, async () => {
    if ((await claims()).some((c) => c.metadata.name === claim.metadata.name)) return undefined;
    try {
      await core.readNamespacedPod(podName!, NS);
      return undefined;
    } catch {
      return true;
    }
  });
  await until('the warm pool to refill', 240_000, async () => ((await warmReady()) >= WARM ? true : undefined));
});

test('a run with other limits is tether’s own pod, not a claim', async () => {
  const run = await t.alice.createRun({ conversationId: 'as-own', limits: { memoryMb: 640 } });
  assert.equal(run.state, RunState.READY, run.error);
  assert.ok(!(await claims()).some((c) => c.metadata.labels?.['dev.tether.run-id'] === run.runId));
  await t.alice.deleteRun(run.runId);
});
