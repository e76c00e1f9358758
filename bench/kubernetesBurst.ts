/**
 * Many CreateRuns at once across two replicas of one instance, from the cluster's shared pool
 * (test cluster, one node): every run answers READY, no pod is claimed twice, the pool refills
 * to its size and not past it; claims per second and the burst's wall time are reported.
 *
 * The node holds `maxPods: 50` (scripts/cluster.sh), so the burst is sized to fit it: a pool of
 * 20 and 30 CreateRuns at once (20 claims, 10 cold starts), then the pool's 20 again. Runs are
 * small (256 MiB, half a core with a twentieth of it requested) so that 50 fit its memory and CPU.
 */
import * as k8s from '@kubernetes/client-node';
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { RunStart, RunState } from '@tether/contract';
import { TetherClient } from '../clients/typescript/src';
import { type Replica, spawnReplica, stopReplica } from '../test/integration/kubernetes/support';
import { summary } from './lib';

const POOL = 20;
const BURST = 30;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Options {
  kc: k8s.KubeConfig;
  image: string;
  namespace(ns: string): Promise<void>;
}

export async function burst(o: Options): Promise<Record<string, unknown>> {
  const core = o.kc.makeApiClient(k8s.CoreV1Api);
  const ns = `tether-bench-burst-${process.pid}`;
  const instance = `bench-burst-${process.pid}`;
  await o.namespace(ns);
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tether-bench-burst-'));
  const base = 27000 + (process.pid % 5000);
  const replicas: Replica[] = [];
  const clients: TetherClient[] = [];
  const pods = async () =>
    (
      await core.listNamespacedPod(ns, undefined, undefined, undefined, undefined, `dev.tether.instance=${instance}`)
    ).body.items.filter((p) => !p.metadata?.deletionTimestamp);
  const state = (p: k8s.V1Pod) => p.metadata?.labels?.['dev.tether.pool-state'];
  const idleCount = async () =>
    (await pods()).filter((p) => state(p) === 'idle' && p.status?.phase === 'Running').length;
  const waitFull = async (what: string) => {
    const t0 = performance.now();
    const deadline = Date.now() + 600_000;
    while ((await idleCount()) < POOL) {
      if (Date.now() > deadline) throw new Error(`${what}: the pool did not fill: ${replicas[0]?.log().slice(-3000)}`);
      await sleep(500);
    }
    return performance.now() - t0;
  };
  try {
    for (let i = 0; i < 2; i++) {
      replicas.push(
        spawnReplica({
          port: base + i,
          instance,
          namespace: ns,
          stateDir,
          image: o.image,
          config: {
            pool: { size: POOL, maxTotal: POOL, concurrency: 2, maxMemoryMb: 65536 },
            limits: { default: { memoryMb: 256, cpuMillis: 500, diskMb: 256 } },
            kubernetes: { cpuRequestPercent: 5 },
            runs: { startTimeoutSeconds: 300 },
          },
          env: { TETHER_POOL_SIZE: String(POOL) },
        }),
      );
      clients.push(new TetherClient(`127.0.0.1:${base + i}`, 'token-a'));
    }
    await Promise.all(replicas.map((r) => r.ready));
    const fillMs = await waitFull('first fill');
    // Every replica links to each idle pod as it turns idle: a moment for the last links.
    await sleep(3000);

    const t0 = performance.now();
    const answers = await Promise.all(
      Array.from({ length: BURST }, async (_, i) => {
        const a = performance.now();
        const run = await clients[i % 2].createRun({ conversationId: `burst-${i}` });
        return { run, ms: performance.now() - a };
      }),
    );
    const wallMs = performance.now() - t0;
    const notReady = answers.filter((a) => a.run.state !== RunState.READY);
    const fromPool = answers.filter((a) => a.run.start === RunStart.POOL);
    const all = await pods();
    const byRun = new Map<string, number>();
    for (const p of all) {
      const runId = p.metadata?.labels?.['dev.tether.run-id'] ?? '';
      if (runId.startsWith('run-')) byRun.set(runId, (byRun.get(runId) ?? 0) + 1);
    }
    const claimedTwice = [...byRun.values()].filter((n) => n > 1).length;
    const claimsEnd = Math.max(...fromPool.map((a) => a.ms));
    const refillMs = await waitFull('refill');
    await sleep(3000);
    const unclaimedAfter = (await pods()).filter((p) => state(p) !== undefined && state(p) !== 'claimed').length;
    for (const a of answers) await clients[0].deleteRun(a.run.runId).catch(() => undefined);
    return {
      description: `two tether serve replicas of one instance, a shared pool of ${POOL} (256 MiB, half a core, 5 % of it requested); ${BURST} CreateRuns at once, alternating between the replicas, each timed to its answer; the node holds at most 50 pods`,
      firstFillSeconds: Math.round(fillMs / 100) / 10,
      burst: BURST,
      ready: BURST - notReady.length,
      notReady: notReady.map((a) => a.run.error).slice(0, 5),
      fromPool: fromPool.length,
      cold: BURST - fromPool.length,
      claimedTwice,
      createRunMs: summary(answers.map((a) => a.ms)),
      claimsPerSecond: Math.round((fromPool.length / (claimsEnd / 1000)) * 10) / 10,
      burstWallSeconds: Math.round(wallMs / 100) / 10,
      refillSeconds: Math.round(refillMs / 100) / 10,
      pooledUnclaimedAfterRefill: unclaimedAfter,
    };
  } finally {
    clients.forEach((c) => c.close());
    for (const r of replicas) await stopReplica(r);
    await core.deleteNamespace(ns).catch(() => undefined);
  }
}
