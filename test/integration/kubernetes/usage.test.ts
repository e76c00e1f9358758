/**
 * GetRun's usage for a kubernetes run, as its runner reads it from its own cgroup (no request
 * to the API server), moves when the run allocates memory and writes to disk; and the pod's
 * process limit (the kubelet's podPidsLimit, which the test cluster sets to 1024) holds inside
 * the run: threads past it cannot start, and the run goes on.
 */
import * as k8s from '@kubernetes/client-node';
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Approval, RunState } from '@tether/contract';
import { resultText } from '../../../clients/typescript/src';
import { defaultConfig } from '../../../gateway/src/config';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { runnerImage } from '../docker/support';
import { adminConfig, adminConfigFile, deleteNamespace, runsNamespace, until } from './support';

const NS = `tether-runs-u${process.pid}`;
const core = adminConfig().makeApiClient(k8s.CoreV1Api);
const POD_PIDS_LIMIT = 1024;
let t: TestGateway;

before(async () => {
  await runsNamespace(core, NS);
  t = await startTestGateway({
    provider: 'kubernetes',
    kubernetes: { ...defaultConfig().kubernetes, namespace: NS, kubeconfig: adminConfigFile(), image: runnerImage() },
    limits: { default: { memoryMb: 1024, cpuMillis: 1000, pids: 512, diskMb: 512 } },
    runs: { startTimeoutSeconds: 120 },
  });
});

after(async () => {
  await t?.close();
  await deleteNamespace(core, NS);
});

async function evalIn(runId: string, code: string): Promise<string> {
  const r = await t.alice.callTool(
    runId,
    'eval',
    { code, description: 'a cell for the usage test' },
    { deadlineMs: 120_000 },
  );
  assert.equal(r.result.isError, false, resultText(r.result));
  return resultText(r.result);
}

test('GetRun usage of a kubernetes run moves with the memory it holds and the disk it writes', async () => {
  const run = await t.alice.createRun({
    conversationId: 'usage',
    features: { eval: true },
    approvals: { exec: Approval.AUTO, write: Approval.AUTO },
  });
  assert.equal(run.state, RunState.READY, run.error);
  const first = (await t.alice.getRun(run.runId)).usage;
  assert.ok(first, 'a kubernetes run reports usage');
  assert.ok(
    first.memoryBytes > 0n && first.cpuTimeMs > 0n,
    JSON.stringify(first, (_, v) => String(v)),
  );

  // 300 MiB held by the kernel, 64 MiB written to the workspace.
  await evalIn(
    run.runId,
    "import os\nheld = bytearray(os.urandom(300 << 20))\nopen('blob', 'wb').write(os.urandom(64 << 20))\nlen(held)",
  );
  const grown = await until('usage to show the memory and the file', 30_000, async () => {
    const u = (await t.alice.getRun(run.runId)).usage!;
    return u.memoryBytes - first.memoryBytes >= 250n << 20n && u.diskBytes - first.diskBytes >= 60n << 20n
      ? u
      : undefined;
  });
  assert.ok(grown.cpuTimeMs > first.cpuTimeMs, 'the allocation took CPU');

  // Let go of both: the figures come down again.
  await evalIn(run.runId, "del held\nimport gc, os\ngc.collect()\nos.remove('blob')\n'freed'");
  await until('usage to come down', 30_000, async () => {
    const u = (await t.alice.getRun(run.runId)).usage!;
    return grown.memoryBytes - u.memoryBytes >= 200n << 20n && grown.diskBytes - u.diskBytes >= 60n << 20n
      ? true
      : undefined;
  });

  // The pod's process limit: threads count, and past it none can start; the run goes on.
  const out = await evalIn(
    run.runId,
    [
      'import threading',
      'stop = threading.Event()',
      'n, err = 0, ""',
      'try:',
      '    while n < 4000:',
      '        threading.Thread(target=stop.wait, daemon=True).start()',
      '        n += 1',
      'except RuntimeError as e:',
      '    err = str(e)',
      'stop.set()',
      'print(f"THREADS {n} {err}")',
    ].join('\n'),
  );
  const m = /THREADS (\d+) (.+)/.exec(out);
  assert.ok(m, out);
  const started = Number(m[1]);
  assert.ok(started < POD_PIDS_LIMIT && started > POD_PIDS_LIMIT / 2, `${started} threads started: ${out}`);
  assert.match(m[2], /can't start new thread/);
  assert.match(await evalIn(run.runId, '6 * 7'), /42/);
  await t.alice.deleteRun(run.runId);
});
