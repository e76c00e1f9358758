/**
 * The warm pool kept in the cluster and shared by gateway replicas (two `tether serve`
 * processes of one instance on the test cluster): both claim from it at once and no pod is
 * claimed twice; each learns of the other's runs by its watch; the pool refills; a claim left
 * unbound by a replica that died is removed by the other; a replica killed under a burst of
 * creates leaves no pod claimed twice and none lost.
 */
import * as k8s from '@kubernetes/client-node';
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { RunStart, RunState } from '@tether/contract';
import { TetherClient, resultText } from '../../../clients/typescript/src';
import { runnerImage } from '../docker/support';
import { adminConfig, deleteNamespace, type Replica, runsNamespace, spawnReplica, stopReplica, until } from './support';

const NS = `tether-runs-p${process.pid}`;
const core = adminConfig().makeApiClient(k8s.CoreV1Api);
const instance = `pool-${process.pid}`;
const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tether-pool-'));
const POOL = 3;
// A claim left unbound this long (plus the grace) is taken for its claimer's death.
const START_TIMEOUT_S = 20;
const base = 23000 + (process.pid % 10000);
const replicas: Replica[] = [];
const clients: TetherClient[] = [];

function serve(port: number): Replica {
  const r = spawnReplica({
    port,
    instance,
    namespace: NS,
    stateDir,
    image: runnerImage(),
    // Half a GiB and a core a run (a tenth of it requested): the first test's six runs, the
    // burst's eight and a refilled pool of three all fit one 2-core, 24 GiB node.
    config: {
      pool: { size: POOL, maxTotal: POOL, concurrency: 2 },
      runs: { startTimeoutSeconds: START_TIMEOUT_S },
      limits: { default: { memoryMb: 512, cpuMillis: 1000 } },
    },
    env: { TETHER_POOL_SIZE: String(POOL) },
  });
  replicas.push(r);
  return r;
}

function client(port: number): TetherClient {
  const c = new TetherClient(`127.0.0.1:${port}`, 'token-a');
  clients.push(c);
  return c;
}

async function pods(): Promise<k8s.V1Pod[]> {
  return (
    await core.listNamespacedPod(NS, undefined, undefined, undefined, undefined, `dev.tether.instance=${instance}`)
  ).body.items.filter((p) => !p.metadata?.deletionTimestamp);
}

const poolState = (p: k8s.V1Pod) => p.metadata?.labels?.['dev.tether.pool-state'];
/** Pooled pods not claimed (starting or idle): what the pool holds. Cold runs' pods have no pool state. */
const unclaimed = async () => (await pods()).filter((p) => poolState(p) !== undefined && poolState(p) !== 'claimed');
const idle = async () => (await pods()).filter((p) => poolState(p) === 'idle' && p.status?.phase === 'Running');

/** Every run pod names one run, and every run id is on one pod only. */
function assertNoDoubleClaim(all: k8s.V1Pod[]): void {
  const byRun = new Map<string, string[]>();
  for (const p of all) {
    const runId = p.metadata?.labels?.['dev.tether.run-id'] ?? '';
    if (!runId.startsWith('run-')) continue;
    byRun.set(runId, [...(byRun.get(runId) ?? []), p.metadata!.name!]);
  }
  for (const [runId, names] of byRun) assert.equal(names.length, 1, `${runId} is on ${names.join(', ')}`);
}

before(async () => {
  await runsNamespace(core, NS);
});

after(async () => {
  // The replicas' own warnings (the test gateways log at warn): what to read when a test here failed.
  for (const r of replicas) console.error(`replica on ${r.port}:\n${r.log().slice(-6000)}`);
  clients.forEach((c) => c.close());
  for (const r of replicas) await stopReplica(r);
  await deleteNamespace(core, NS);
});

test('two replicas claim from one shared pool at once: every run answers, no pod is claimed twice, the pool refills', async () => {
  const a = serve(base);
  const b = serve(base + 1);
  await Promise.all([a.ready, b.ready]);
  const viaA = client(base);
  const viaB = client(base + 1);
  await until(`${POOL} idle pooled pods`, 180_000, async () => ((await idle()).length === POOL ? true : undefined));
  // Exactly the target: one replica fills at a time.
  assert.equal((await unclaimed()).length, POOL);
  // Both replicas connect to the idle pods ahead of a claim.
  await new Promise((r) => setTimeout(r, 2000));

  const creates = [viaA, viaB, viaA, viaB, viaA, viaB].map((c, i) => c.createRun({ conversationId: `pool-${i}` }));
  const runs = await Promise.all(creates);
  const answered = Date.now();
  for (const r of runs) assert.equal(r.state, RunState.READY, r.error);
  // Each run is known to the replica that did not make it within a second (its watch told it).
  await Promise.all(
    runs.map((r, i) =>
      until(`${r.runId} known to the other replica`, 5_000, async () =>
        (await [viaB, viaA][i % 2].getRun(r.runId).catch(() => undefined)) ? true : undefined,
      ),
    ),
  );
  const knownAfterMs = Date.now() - answered;
  assert.ok(knownAfterMs <= 1000, `the other replica knew every run ${knownAfterMs} ms after the last answer`);
  const fromPool = runs.filter((r) => r.start === RunStart.POOL);
  assert.ok(fromPool.length >= 1, 'some runs came from the pool');
  assert.ok(fromPool.length <= POOL, `at most ${POOL} from the pool, not ${fromPool.length}`);
  assertNoDoubleClaim(await pods());
  const claimed = (await pods()).filter((p) => poolState(p) === 'claimed');
  assert.equal(claimed.length, fromPool.length);
  for (const p of claimed) assert.ok(runs.some((r) => r.runId === p.metadata?.labels?.['dev.tether.run-id']));

  // Each replica serves every run, the other's included (its watch told it of them).
  for (const r of runs)
    for (const c of [viaA, viaB]) {
      await until(`${r.runId} ready on both replicas`, 30_000, async () =>
        (await c.getRun(r.runId).catch(() => undefined))?.state === RunState.READY ? true : undefined,
      );
      const out = await c.callTool(r.runId, 'read', { path: '.' });
      assert.equal(out.result.isError, false, resultText(out.result));
    }

  // The pool refills to its target, not past it.
  await until('the pool to refill', 180_000, async () => ((await idle()).length === POOL ? true : undefined));
  await new Promise((r) => setTimeout(r, 3000));
  assert.equal((await unclaimed()).length, POOL);
  for (const r of runs) await viaA.deleteRun(r.runId);
});

test('a claim its replica never bound (it died after the claim) is removed by another replica; the pool refills', async () => {
  const viaB = client(base + 1);
  await until(`${POOL} idle pooled pods`, 180_000, async () => ((await idle()).length === POOL ? true : undefined));
  const [victim] = await idle();
  const name = victim.metadata!.name!;
  // The state a replica leaves when it dies between its claim (this very patch) and the bind.
  const runId = `run-orphan-${process.pid}`;
  const labels = {
    'dev.tether.managed': 'true',
    'dev.tether.instance': instance,
    'dev.tether.run-id': runId,
    'dev.tether.tenant': 'acme',
    'dev.tether.spec': Buffer.from(
      JSON.stringify({ spec: { conversationId: 'orphan', limits: {} }, createdAt: new Date().toISOString() }),
    ).toString('base64'),
  };
  await core.patchNamespacedPod(
    name,
    NS,
    {
      metadata: {
        resourceVersion: victim.metadata!.resourceVersion,
        labels: {
          'dev.tether.run-id': runId,
          'dev.tether.tenant': 'acme',
          'dev.tether.pool-state': 'claimed',
        },
        annotations: {
          'dev.tether.labels': JSON.stringify(labels),
          'dev.tether.claim': JSON.stringify({ by: 'a-replica-that-died', at: new Date().toISOString() }),
        },
      },
    },
    undefined,
    undefined,
    undefined,
    undefined,
    undefined,
    { headers: { 'Content-Type': 'application/merge-patch+json' } },
  );
  // Nobody was told of this run: it is not served as one, and goes once the claim is past its time.
  await until('the unbound claim to be removed', (START_TIMEOUT_S + 60) * 1000, async () =>
    (await pods()).some((p) => p.metadata?.name === name) ? undefined : true,
  );
  await assert.rejects(viaB.getRun(runId));
  await until('the pool to refill', 180_000, async () => ((await idle()).length === POOL ? true : undefined));
});

test('a replica killed under a burst of creates leaves no pod claimed twice and none lost', async () => {
  const [a, b] = replicas;
  const viaA = client(a.port);
  const viaB = client(b.port);
  await until(`${POOL} idle pooled pods`, 180_000, async () => ((await idle()).length === POOL ? true : undefined));
  await new Promise((r) => setTimeout(r, 2000));
  const onA = Array.from({ length: 4 }, (_, i) => viaA.createRun({ conversationId: `burst-a-${i}` }));
  const onB = Array.from({ length: 4 }, (_, i) => viaB.createRun({ conversationId: `burst-b-${i}` }));
  for (const p of onA) p.catch(() => undefined);
  // A dies while its creates (claims and binds among them) are under way.
  await new Promise((r) => setTimeout(r, 150));
  a.child.kill('SIGKILL');
  const fromB = await Promise.all(onB);
  for (const r of fromB) assert.equal(r.state, RunState.READY, r.error);
  const answeredByA = (await Promise.allSettled(onA)).flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));

  // B takes over the filling, and every run pod is one B serves or one it removes (a claim A
  // never answered): none is left as a run nobody serves, none is claimed twice.
  await until('every run pod served by B or gone', (START_TIMEOUT_S + 90) * 1000, async () => {
    const all = await pods();
    assertNoDoubleClaim(all);
    const runPods = all.filter((p) => (p.metadata?.labels?.['dev.tether.run-id'] ?? '').startsWith('run-'));
    for (const p of runPods) {
      const runId = p.metadata!.labels!['dev.tether.run-id'];
      const r = await viaB.getRun(runId).catch(() => undefined);
      if (r?.state !== RunState.READY) return undefined;
    }
    return true;
  });
  for (const r of [...fromB, ...answeredByA]) {
    const got = await viaB.getRun(r.runId);
    assert.equal(got.state, RunState.READY, `${r.runId}: ${got.error}`);
  }
  await until('the pool to refill under B', 180_000, async () => ((await idle()).length === POOL ? true : undefined));
  assert.equal((await unclaimed()).length, POOL);
});
