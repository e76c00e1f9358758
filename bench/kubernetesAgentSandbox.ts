/**
 * Runs as agent-sandbox claims (`kubernetes.agentSandbox`), measured on the test cluster with
 * agent-sandbox's own controller and two `tether serve` replicas of one instance, the shape of
 * the shared pool's figures: CreateRun → first `read` answer when warm sandboxes wait in the
 * SandboxWarmPool, one CreateRun on each replica at once and one alone, against, in the same
 * run, a bare SandboxClaim of the same pool bound by agent-sandbox (created →
 * `status.sandbox.name` set), which is what agent-sandbox itself costs before tether marks the
 * pod, boots its runner and initializes it.
 */
import * as k8s from '@kubernetes/client-node';
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { RunState } from '@tether/contract';
import { TetherClient } from '../clients/typescript/src';
import { type Replica, spawnReplica, stopReplica } from '../test/integration/kubernetes/support';
import { summary, timeIt } from './lib';

const WARM = 2;
const GROUP = 'extensions.agents.x-k8s.io';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Options {
  kc: k8s.KubeConfig;
  image: string;
  rounds: number;
  namespace(ns: string): Promise<void>;
}

export async function agentSandboxClaims(o: Options): Promise<Record<string, unknown>> {
  const ns = `tether-bench-as-${process.pid}`;
  const instance = `bench-as-${process.pid}`;
  const pool = `tether-${instance}`;
  await o.namespace(ns);
  const custom = o.kc.makeApiClient(k8s.CustomObjectsApi);
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tether-bench-as-'));
  const port = 26000 + (process.pid % 5000);
  const replicas: Replica[] = [];
  const clients: TetherClient[] = [];
  const warmReady = async () =>
    (
      (await custom.getNamespacedCustomObject(GROUP, 'v1beta1', ns, 'sandboxwarmpools', pool).catch(() => undefined))
        ?.body as { status?: { readyReplicas?: number } } | undefined
    )?.status?.readyReplicas ?? 0;
  const warmFull = async () => {
    const deadline = Date.now() + 300_000;
    while ((await warmReady()) < WARM) {
      if (Date.now() > deadline) throw new Error(`the warm pool did not fill: ${replicas[0]?.log().slice(-3000)}`);
      await sleep(250);
    }
    await sleep(1000);
  };
  try {
    for (let i = 0; i < 2; i++) {
      replicas.push(
        spawnReplica({
          port: port + i,
          instance,
          namespace: ns,
          stateDir,
          image: o.image,
          config: {
            kubernetes: { agentSandbox: true },
            pool: { size: WARM, maxTotal: WARM, concurrency: 2 },
            limits: { default: { memoryMb: 512, cpuMillis: 1000 } },
          },
          env: { TETHER_POOL_SIZE: String(WARM) },
        }),
      );
      clients.push(new TetherClient(`127.0.0.1:${port + i}`, 'token-a'));
    }
    await Promise.all(replicas.map((r) => r.ready));

    const claims = async () =>
      (
        (await custom.listNamespacedCustomObject(GROUP, 'v1beta1', ns, 'sandboxclaims')).body as {
          items: { metadata: { labels?: Record<string, string> }; status?: { sandbox?: { name?: string } } }[];
        }
      ).items;
    let coldClaims = 0;
    /** CreateRun and a first `read` on `c`; whether agent-sandbox bound it to a warm sandbox. */
    const one = async (c: TetherClient, i: number) => {
      let runId = '';
      const ms = await timeIt(async () => {
        const run = await c.createRun({ conversationId: `bench-as-${i}` });
        if (run.state !== RunState.READY) throw new Error(`run not ready: ${run.error}`);
        runId = run.runId;
        const out = await c.callTool(runId, 'read', { path: '.' });
        if (out.result.isError) throw new Error('first call failed');
      });
      const mine = (await claims()).find((x) => x.metadata.labels?.['dev.tether.run-id'] === runId);
      if (!mine?.status?.sandbox?.name?.startsWith(`${pool}-`)) coldClaims++;
      return { ms, runId };
    };

    const together: number[] = [];
    const alone: number[] = [];
    const bare: number[] = [];
    for (let round = 0; round < o.rounds; round++) {
      await warmFull();
      const two = await Promise.all([one(clients[0], round * 3), one(clients[1], round * 3 + 1)]);
      together.push(...two.map((r) => r.ms));
      for (const r of two) await clients[0].deleteRun(r.runId);
      await warmFull();
      const single = await one(clients[round % 2], round * 3 + 2);
      alone.push(single.ms);
      await clients[0].deleteRun(single.runId);

      // The baseline: the same pool, a claim nobody serves, until agent-sandbox binds it.
      await warmFull();
      const name = `bare-${round}`;
      bare.push(
        await timeIt(async () => {
          await custom.createNamespacedCustomObject(GROUP, 'v1beta1', ns, 'sandboxclaims', {
            apiVersion: `${GROUP}/v1beta1`,
            kind: 'SandboxClaim',
            metadata: { name },
            spec: { warmPoolRef: { name: pool } },
          });
          for (;;) {
            const c = (await custom.getNamespacedCustomObject(GROUP, 'v1beta1', ns, 'sandboxclaims', name)).body as {
              status?: { sandbox?: { name?: string } };
            };
            if (c.status?.sandbox?.name) return;
            await sleep(5);
          }
        }),
      );
      await custom.deleteNamespacedCustomObject(GROUP, 'v1beta1', ns, 'sandboxclaims', name);
    }
    const r = summary(alone);
    const b = summary(bare);
    return {
      description: `two tether serve replicas of one instance with kubernetes.agentSandbox, a SandboxWarmPool of ${WARM}; ${o.rounds} rounds, each: wait for the pool to be ready, one CreateRun on each replica at once, then (ready again) one alone, each then a read call answered (client side); then the baseline: a bare SandboxClaim of the same pool created and read every 5 ms until bound`,
      twoAtOnceToFirstAnswerMs: summary(together),
      aloneToFirstAnswerMs: r,
      bareClaimBoundMs: b,
      tetherOverBareClaimP50Ms: Math.round(r.p50 - b.p50),
      runsNotFromTheWarmPool: coldClaims,
    };
  } finally {
    clients.forEach((c) => c.close());
    for (const r of replicas) await stopReplica(r);
    await o.kc
      .makeApiClient(k8s.CoreV1Api)
      .deleteNamespace(ns)
      .catch(() => undefined);
  }
}
