/**
 * Stateless gateway replicas on one cluster: two gateway processes serve the same run at once,
 * each through its own exec stream to the runner's socket. Killing one mid-call ends only its
 * call (UNAVAILABLE); the other keeps serving the run with its kernel state and staged edits;
 * a restarted replica finds the run again.
 */
import * as k8s from '@kubernetes/client-node';
import { status } from '@grpc/grpc-js';
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Approval, RunState } from '@tether/contract';
import { TetherClient, resultText } from '../../../clients/typescript/src';
import { runnerImage } from '../docker/support';
import { adminConfig, deleteNamespace, type Replica, runsNamespace, spawnReplica, stopReplica, until } from './support';

const NS = `tether-runs-r${process.pid}`;
const core = adminConfig().makeApiClient(k8s.CoreV1Api);
const instance = `replicas-${process.pid}`;
// Replicas share the transport key (in production: a Secret mounted into each gateway pod).
const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tether-replicas-'));

const replicas: Replica[] = [];
function serve(port: number): Replica {
  const r = spawnReplica({ port, instance, namespace: NS, stateDir, image: runnerImage() });
  replicas.push(r);
  return r;
}

const base = 21000 + (process.pid % 10000);
const clients: TetherClient[] = [];
const client = (port: number, token = 'token-a') => {
  const c = new TetherClient(`127.0.0.1:${port}`, token);
  clients.push(c);
  return c;
};

async function evalIn(c: TetherClient, runId: string, code: string) {
  const r = await c.callTool(
    runId,
    'eval',
    { code, description: 'a cell for the replica test' },
    { deadlineMs: 120_000 },
  );
  return resultText(r.result);
}

before(async () => {
  await runsNamespace(core, NS);
});

after(async () => {
  clients.forEach((c) => c.close());
  for (const r of replicas) await stopReplica(r);
  await deleteNamespace(core, NS);
});

test('two replicas serve one run at once; one killed mid-call loses only its call; a restarted one finds the run', async () => {
  const a = serve(base);
  const b = serve(base + 1);
  await Promise.all([a.ready, b.ready]);
  const viaA = client(base);
  const viaB = client(base + 1);

  const run = await viaA.createRun({
    conversationId: 'replicas',
    features: { eval: true, ast: true },
    approvals: { exec: Approval.AUTO, write: Approval.AUTO },
  });
  assert.equal(run.state, RunState.READY, run.error);
  // Replica B did not create the run: its watch tells it, within a second of A's answer.
  const answered = Date.now();
  await until('replica B to know the run', 5_000, async () =>
    (await viaB.getRun(run.runId).catch(() => undefined)) ? true : undefined,
  );
  const knownAfterMs = Date.now() - answered;
  assert.ok(knownAfterMs <= 1000, `replica B knew the run ${knownAfterMs} ms after A answered`);
  await viaA.putFileMap(run.runId, { 'm.py': 'old_api(1, 2)\n' });

  await until('replica B to serve the run', 30_000, async () => {
    const r = await viaB.getRun(run.runId).catch(() => undefined);
    return r?.state === RunState.READY ? r : undefined;
  });
  // Both at once.
  const [ra, rb] = await Promise.all([
    viaA.callTool(run.runId, 'read', { path: 'm.py' }),
    viaB.callTool(run.runId, 'read', { path: 'm.py' }),
  ]);
  assert.match(resultText(ra.result), /old_api/);
  assert.match(resultText(rb.result), /old_api/);
  // Another tenant sees nothing through either replica.
  for (const port of [base, base + 1])
    await assert.rejects(
      client(port, 'token-b').getRun(run.runId),
      (e: { code: number }) => e.code === status.NOT_FOUND,
    );

  // State held by the runner: a kernel variable and a staged edit, both made through A.
  assert.match(await evalIn(viaA, run.runId, 'x = 41\nx'), /41/);
  const staged = await viaA.callTool(run.runId, 'ast_edit', {
    pattern: 'old_api($A, $B)',
    rewrite: 'new_api($B, $A)',
    path: '.',
  });
  assert.equal(staged.result.isError, false, resultText(staged.result));
  const editId = JSON.parse(staged.result.structuredJson).edit_id as string;

  // A dies in the middle of a call: that call ends UNAVAILABLE.
  const midCall = viaA.callTool(
    run.runId,
    'eval',
    { code: 'import time\ntime.sleep(3)\n"slept"', description: 'a call in flight when its gateway dies' },
    { deadlineMs: 60_000 },
  );
  midCall.catch(() => undefined);
  await new Promise((r) => setTimeout(r, 1000));
  a.child.kill('SIGKILL');
  await assert.rejects(midCall, (e: { code: number }) => e.code === status.UNAVAILABLE);

  // B goes on with the same run: the kernel's state and the staged edit are there.
  assert.match(await evalIn(viaB, run.runId, 'x + 1'), /42/);
  const resolved = await viaB.callTool(run.runId, 'resolve', { edit_id: editId, action: 'accept' });
  assert.equal(resolved.result.isError, false, resultText(resolved.result));
  const after = await viaB.callTool(run.runId, 'read', { path: 'm.py' });
  assert.match(resultText(after.result), /new_api\(2, 1\)/);

  // A restarted replica finds the run again and serves it.
  const a2 = serve(base + 2);
  await a2.ready;
  const viaA2 = client(base + 2);
  assert.equal((await viaA2.getRun(run.runId)).state, RunState.READY);
  assert.match(await evalIn(viaA2, run.runId, 'x * 2'), /82/);

  // DeleteRun through one replica: the pod goes, and the other learns it.
  await viaA2.deleteRun(run.runId);
  const seen = await until('replica B to see the run end', 20_000, async () => {
    const r = await viaB
      .getRun(run.runId)
      .catch((e: { code: number }) => (e.code === status.NOT_FOUND ? 'gone' : undefined));
    return r === 'gone' || (r && r.state === RunState.FAILED) ? r : undefined;
  });
  assert.ok(seen);
});
