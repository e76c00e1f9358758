/**
 * The warm pool the cluster keeps for every replica, measured with two `tether serve`
 * processes of one instance on the test cluster (the shape of a Deployment with two replicas):
 * - CreateRun → first `read` answer claimed from the pool, one CreateRun on each replica at
 *   the same moment, against the cold path through the same replicas in the same run (a run
 *   asking one process fewer than the pool's class keeps, so the pod is the same but made on
 *   demand), rounds alternating; and one claim on one replica alone, the other idle;
 * - how long after the creating replica answered the other one knows the run (GetRun polled
 *   every 10 ms);
 * - API requests per minute per replica with idle runs and a full pool, from each replica's
 *   `tether_provider_api_requests_total`, beside what one list of the same pods costs (the
 *   way replicas found each other's runs before the watch: one such list every 2 s each).
 */
import type * as k8s from '@kubernetes/client-node';
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { RunStart, RunState } from '@tether/contract';
import { TetherClient } from '../clients/typescript/src';
import { defaultConfig } from '../gateway/src/config';
import { type Replica, spawnReplica, stopReplica } from '../test/integration/kubernetes/support';
import { summary, timeIt } from './lib';

const POOL = 4;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Options {
  kc: k8s.KubeConfig;
  core: k8s.CoreV1Api;
  image: string;
  rounds: number;
  idleRuns: number;
  namespace(ns: string): Promise<void>;
}

/** `tether_provider_api_requests_total` by kind, from a replica's /metrics. */
async function apiRequests(metricsPort: number): Promise<Record<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^tether_provider_api_requests_total\{kind="([^"]+)"\} (\d+)/gm))
    out[m[1]] = Number(m[2]);
  return out;
}

const total = (c: Record<string, number>) => Object.values(c).reduce((a, b) => a + b, 0);
const minus = (a: Record<string, number>, b: Record<string, number>) =>
  Object.fromEntries(Object.entries(a).map(([k, v]) => [k, v - (b[k] ?? 0)]));

export async function sharedPool(o: Options): Promise<Record<string, unknown>> {
  const ns = `tether-bench-pool-${process.pid}`;
  const instance = `bench-${process.pid}`;
  const selector = `dev.tether.instance=${instance}`;
  await o.namespace(ns);
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tether-bench-pool-'));
  const base = 24000 + (process.pid % 5000);
  const replicas: Replica[] = [];
  const clients: TetherClient[] = [];
  const listPods = async () =>
    (await o.core.listNamespacedPod(ns, undefined, undefined, undefined, undefined, selector)).body.items.filter(
      (p) => !p.metadata?.deletionTimestamp,
    );
  const idle = async () =>
    (await listPods()).filter(
      (p) => p.metadata?.labels?.['dev.tether.pool-state'] === 'idle' && p.status?.phase === 'Running',
    ).length;
  const poolFull = async (timeoutMs = 180_000) => {
    const deadline = Date.now() + timeoutMs;
    while ((await idle()) < POOL) {
      if (Date.now() > deadline)
        throw new Error(
          `the pool did not fill; replicas said:\n${replicas.map((r) => r.log().slice(-4000)).join('\n')}`,
        );
      await sleep(250);
    }
    // Each replica connects to a pod when it turns idle: a moment for the last one's link.
    await sleep(1500);
  };
  try {
    for (let i = 0; i < 2; i++) {
      const r = spawnReplica({
        port: base + i,
        instance,
        namespace: ns,
        stateDir,
        image: o.image,
        // Half a GiB and a core a run (a tenth requested): the idle runs and the pool fit the one node.
        config: {
          pool: { size: POOL, maxTotal: POOL, concurrency: 2 },
          limits: { default: { memoryMb: 512, cpuMillis: 1000 } },
        },
        env: { TETHER_POOL_SIZE: String(POOL), TETHER_METRICS_LISTEN: `127.0.0.1:${base + 10 + i}` },
      });
      replicas.push(r);
      clients.push(new TetherClient(`127.0.0.1:${base + i}`, 'token-a'));
    }
    await Promise.all(replicas.map((r) => r.ready));
    const [a, b] = clients;
    const defaults = defaultConfig().limits.default;

    const pooled: number[] = [];
    const pooledAlone: number[] = [];
    const cold: number[] = [];
    const knownOnOtherMs: number[] = [];
    let poolMisses = 0;
    let coldFromPool = 0;
    /** CreateRun and a first `read` on `c`; how soon `other` knows the run. */
    const one = async (c: TetherClient, other: TetherClient, i: number, asCold: boolean) => {
      let runId = '';
      let start: RunStart | undefined;
      let answered = 0;
      const ms = await timeIt(async () => {
        const run = await c.createRun({
          conversationId: `bench-pool-${i}`,
          ...(asCold ? { limits: { pids: defaults.pids - 1 } } : {}),
        });
        answered = performance.now();
        if (run.state !== RunState.READY) throw new Error(`run not ready: ${run.error}`);
        runId = run.runId;
        start = run.start;
        const out = await c.callTool(runId, 'read', { path: '.' });
        if (out.result.isError) throw new Error('first call failed');
      });
      for (;;) {
        if (await other.getRun(runId).catch(() => undefined)) break;
        if (performance.now() - answered > 30_000) throw new Error(`${runId} never known to the other replica`);
        await sleep(10);
      }
      knownOnOtherMs.push(performance.now() - answered);
      return { ms, runId, start };
    };

    for (let round = 0; round < o.rounds; round++) {
      await poolFull();
      const claims = await Promise.all([one(a, b, round * 2, false), one(b, a, round * 2 + 1, false)]);
      for (const r of claims) {
        if (r.start === RunStart.POOL) pooled.push(r.ms);
        else poolMisses++;
      }
      const colds = await Promise.all([one(a, b, round * 2, true), one(b, a, round * 2 + 1, true)]);
      for (const r of colds) {
        if (r.start === RunStart.COLD) cold.push(r.ms);
        else coldFromPool++;
      }
      // One claim alone, the other replica idle: what a claim costs without a second one beside it.
      await poolFull();
      const alone = await one(a, b, round * 2, false);
      if (alone.start === RunStart.POOL) pooledAlone.push(alone.ms);
      else poolMisses++;
      for (const r of [...claims, ...colds, alone]) await a.deleteRun(r.runId);
    }

    // Idle: runs that take no calls and a full pool; only what keeping the picture costs.
    const idleRuns: string[] = [];
    for (let i = 0; i < o.idleRuns; i++) idleRuns.push((await a.createRun({ conversationId: `idle-${i}` })).runId);
    await poolFull();
    await sleep(10_000);
    const windowMs = 60_000;
    const before = await Promise.all(replicas.map((_, i) => apiRequests(base + 10 + i)));
    await sleep(windowMs);
    const after = await Promise.all(replicas.map((_, i) => apiRequests(base + 10 + i)));
    const perMinute = after.map((x, i) => {
      const d = minus(x, before[i]);
      return { total: Math.round((total(d) * 60_000) / windowMs), byKind: d };
    });
    const podsNow = (await listPods()).length;
    // What one list of the instance's pods costs now (the old way: every replica, every 2 s).
    const listMs: number[] = [];
    for (let i = 0; i < 20; i++) listMs.push(await timeIt(listPods));
    for (const id of idleRuns) await a.deleteRun(id);

    return {
      description: `two tether serve replicas of one instance, pool.size ${POOL} (class of the default limits), concurrency 2; ${o.rounds} rounds, each: wait for a full pool, one CreateRun on each replica at once (claims), then one on each at once asking one process fewer (the same pod, started cold), then one claim on one replica alone; first answer = CreateRun then a read call answered, client side`,
      poolClaimToFirstAnswerMs: summary(pooled),
      poolClaimAloneToFirstAnswerMs: summary(pooledAlone),
      coldToFirstAnswerMs: summary(cold),
      poolMisses,
      coldFromPool,
      knownOnOtherReplicaMs: summary(knownOnOtherMs),
      idle: {
        pods: podsNow,
        idleRuns: o.idleRuns,
        pooled: POOL,
        windowSeconds: windowMs / 1000,
        apiRequestsPerMinutePerReplica: perMinute,
        oneListOfThesePodsMs: summary(listMs),
        before: `each replica listed every run pod every 2 s (DISCOVER_EVERY_MS): 30 lists a minute, each of all ${podsNow} pods`,
      },
    };
  } finally {
    clients.forEach((c) => c.close());
    for (const r of replicas) await stopReplica(r);
    await o.core.deleteNamespace(ns).catch(() => undefined);
  }
}
