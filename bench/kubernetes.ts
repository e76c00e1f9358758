/**
 * The kubernetes provider on the project's test cluster (scripts/cluster.sh up, runner image
 * loaded), each figure beside its baseline measured in the same run:
 * - CreateRun → first tool answer, against the same image started as a bare pod (same
 *   hardening, `sleep` instead of the runner) and `true` exec'd in it, alternating;
 * - sequential `read` calls through the provider (exec-relayed socket), against a bare
 *   grpc-js unary echo on loopback;
 * - two replicas (`tether serve` processes of one instance) sharing the cluster's warm pool:
 *   CreateRun → first answer claimed from the pool, both replicas at once, against the cold
 *   path through the same replicas (a class the pool does not keep), alternating rounds; how
 *   soon the other replica knows each run; API requests per minute per replica at idle.
 * Usage: node dist/bench/kubernetes.js [starts] [calls] [pool rounds] [idle runs]
 */
import { echoBaseline } from './echo';
import * as k8s from '@kubernetes/client-node';
import * as os from 'node:os';
import * as path from 'node:path';
import { defaultConfig } from '../gateway/src/config';
import { runPod } from '../gateway/src/sandbox/kubernetes/podSpec';
import { openExec } from '../gateway/src/sandbox/kubernetes/streams';
import { LABELS } from '../gateway/src/sandbox/provider';
import { startTestGateway } from '../test/helpers/gateway';
import { summary, timeIt, writeResult } from './lib';
import { agentSandboxClaims } from './kubernetesAgentSandbox';
import { burst } from './kubernetesBurst';
import { sharedPool } from './kubernetesPool';

const STARTS = Number(process.argv[2] ?? 8);
const CALLS = Number(process.argv[3] ?? 2000);
const ROUNDS = Number(process.argv[4] ?? 10);
const IDLE_RUNS = Number(process.argv[5] ?? 10);
const NS = `tether-bench-${process.pid}`;
const KUBECONFIG = process.env.KUBECONFIG || path.resolve(__dirname, '../../.tether/cluster/admin.kubeconfig');
const IMAGE = process.env.TETHER_IMAGE ?? '';

const kc = new k8s.KubeConfig();
kc.loadFromFile(KUBECONFIG);
const core = kc.makeApiClient(k8s.CoreV1Api);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function namespace(ns = NS): Promise<void> {
  await core.createNamespace({
    metadata: { name: ns, labels: { 'pod-security.kubernetes.io/enforce': 'restricted' } },
  });
  for (;;) {
    try {
      await core.readNamespacedServiceAccount('default', ns);
      return;
    } catch {
      await sleep(200);
    }
  }
}

/** The baseline: the run's pod spec with `sleep` as its command; Running, then `exec true`. */
async function barePod(i: number): Promise<number> {
  const limits = defaultConfig().limits.default;
  const pod = runPod(
    { runId: `bare-${i}`, tenant: 'bench', labels: { [LABELS.managed]: 'bench' }, limits },
    { namespace: NS, image: IMAGE, uid: 1000, gid: 1000, ephemeralOverheadMb: 256, cpuRequestPercent: 10 },
  );
  pod.spec!.containers[0].command = ['sleep', '3600'];
  pod.spec!.containers[0].stdin = false;
  const name = pod.metadata!.name!;
  const ms = await timeIt(async () => {
    await core.createNamespacedPod(NS, pod);
    for (;;) {
      const p = (await core.readNamespacedPod(name, NS)).body;
      if (p.status?.containerStatuses?.[0]?.state?.running) break;
      await sleep(200); // the provider polls at the same interval
    }
    const exec = await openExec(kc, { namespace: NS, pod: name, container: 'runner' }, ['true']);
    exec.stdin.end();
    const s = await exec.done;
    if (s.status !== 'Success') throw new Error(`exec true: ${s.message}`);
  });
  await core.deleteNamespacedPod(name, NS, undefined, undefined, 0);
  return ms;
}

async function main() {
  if (!IMAGE) throw new Error('set TETHER_IMAGE (source .tether/images.env)');
  await namespace();
  const t = await startTestGateway({
    provider: 'kubernetes',
    kubernetes: { ...defaultConfig().kubernetes, namespace: NS, kubeconfig: KUBECONFIG, image: IMAGE },
  });
  let open = true;
  try {
    const tether: number[] = [];
    const bare: number[] = [];
    for (let i = 0; i < STARTS; i++) {
      bare.push(await barePod(i));
      let runId = '';
      tether.push(
        await timeIt(async () => {
          const run = await t.alice.createRun({ conversationId: `bench-${i}` });
          runId = run.runId;
          const out = await t.alice.callTool(runId, 'read', { path: '.' });
          if (out.result.isError) throw new Error('first call failed');
        }),
      );
      await t.alice.deleteRun(runId);
    }

    const run = await t.alice.createRun({ conversationId: 'bench-calls' });
    await t.alice.putFileMap(run.runId, { 'bench.txt': 'hello\n' });
    const once = async () => {
      const out = await t.alice.callTool(run.runId, 'read', { path: 'bench.txt' });
      if (out.result.isError) throw new Error('read failed');
    };
    for (let i = 0; i < 200; i++) await once();
    const calls: number[] = [];
    for (let i = 0; i < CALLS; i++) calls.push(await timeIt(once));
    await t.alice.deleteRun(run.runId);
    const echo = summary(await echoBaseline(CALLS));
    await t.close();
    open = false;
    const pool = await sharedPool({ kc, core, image: IMAGE, rounds: ROUNDS, idleRuns: IDLE_RUNS, namespace });
    const agentSandbox = await agentSandboxClaims({ kc, image: IMAGE, rounds: ROUNDS, namespace });
    const sharedPoolBurst = await burst({ kc, image: IMAGE, namespace });
    const c = summary(calls);
    const s = summary(tether);
    const b = summary(bare);
    writeResult('kubernetes', {
      description: `on the project's single-node test cluster (Kubernetes 1.34.4, containerd 1.6, runc, loopback CNI); ${STARTS} starts each, alternating; ${CALLS} sequential read calls after 200 warm-up calls`,
      cluster: 'scripts/cluster.sh (all components on 127.0.0.1 of the same machine)',
      // The machine is shared: its load when the figures were taken.
      loadAverage1m5m15m: os.loadavg().map((x) => Math.round(x * 10) / 10),
      createRunToFirstAnswerMs: s,
      barePodRunningThenExecTrueMs: b,
      startOverheadP50Ms: Math.round(s.p50 - b.p50),
      bareGrpcUnaryEchoMs: echo,
      tetherReadCallMs: c,
      callOverheadP50Ms: Math.round((c.p50 - echo.p50) * 1000) / 1000,
      ratioP50: Math.round((c.p50 / echo.p50) * 100) / 100,
      sharedPool: pool,
      sharedPoolBurst,
      agentSandbox,
    });
  } finally {
    if (open) await t.close();
    await core.deleteNamespace(NS).catch(() => undefined);
  }
}

main().catch(async (err) => {
  console.error(err);
  await core.deleteNamespace(NS).catch(() => undefined);
  process.exit(1);
});
