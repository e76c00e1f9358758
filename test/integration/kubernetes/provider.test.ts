/**
 * The kubernetes provider on the real test cluster (scripts/cluster.sh): a run is a hardened
 * pod reached only through the API server; every tool family answers through it; files move
 * as tar over exec with the Docker provider's confinement; tenants stay apart; the pod's end
 * (deleted, OOM-killed, evicted) fails the run with Kubernetes' reason.
 */
import * as k8s from '@kubernetes/client-node';
import { status } from '@grpc/grpc-js';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as tarStream from 'tar-stream';
import { Approval, RunState } from '@tether/contract';
import { resultText, type TetherClient } from '../../../clients/typescript/src';
import { defaultConfig } from '../../../gateway/src/config';
import { diagnose } from '../../../gateway/src/doctor';
import { LABELS } from '../../../gateway/src/sandbox/provider';
import { OOM_EXIT_CODE } from '../../../protocol/src/transport';
import { buildTemplate } from '../../../gateway/src/templates/build';
import { templateBuilder } from '../../../gateway/src/sandbox/templateEngine';
import { podName } from '../../../gateway/src/sandbox/kubernetes/podSpec';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { fixture as debugFixture } from '../debug/helpers';
import { runnerImage } from '../docker/support';
import { fixture as lspFixture } from '../lsp/helpers';
import { adminConfig, adminConfigFile, deleteNamespace, execInPod, runsNamespace, tokenConfig, until } from './support';

const NS = `tether-runs-t${process.pid}`;
const kc = adminConfig();
const core = kc.makeApiClient(k8s.CoreV1Api);
let t: TestGateway;

/** The kubernetes section for a test gateway: this file's namespace, the suite's runner image. */
export function kubernetesSection(namespace: string) {
  return { ...defaultConfig().kubernetes, namespace, kubeconfig: adminConfigFile(), image: runnerImage() };
}

async function read(client: TetherClient, runId: string, path: string): Promise<string> {
  const out = await client.callTool(runId, 'read', { path });
  assert.equal(out.result.isError, false, resultText(out.result));
  return resultText(out.result);
}

async function tarWith(entries: [Partial<tarStream.Header> & { name: string }, string][]): Promise<Buffer> {
  const pack = tarStream.pack();
  for (const [h, body] of entries) pack.entry(h, body);
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack as unknown as AsyncIterable<Buffer>) chunks.push(c);
  return Buffer.concat(chunks);
}

async function tarNames(tar: Buffer): Promise<string[]> {
  const names: string[] = [];
  const ex = tarStream.extract();
  ex.on('entry', (h, s, next) => (names.push(h.name), s.resume(), s.on('end', next)));
  await new Promise<void>((res, rej) => (ex.on('finish', () => res()), ex.on('error', rej), ex.end(tar)));
  return names;
}

before(async () => {
  await runsNamespace(core, NS);
  t = await startTestGateway({
    provider: 'kubernetes',
    kubernetes: kubernetesSection(NS),
    limits: { default: { memoryMb: 2048, cpuMillis: 1000, pids: 512, diskMb: 256 } },
    runs: { startTimeoutSeconds: 120 },
    maxPutFilesBytes: 4 * 1024 * 1024,
  });
});

after(async () => {
  await t?.close();
  await deleteNamespace(core, NS);
});

describe('one run as a pod', () => {
  let runId = '';
  let pod = '';

  before(async () => {
    const t0 = Date.now();
    const run = await t.alice.createRun({
      conversationId: 'kube',
      features: { lsp: true, debug: true, eval: true, ast: true },
      approvals: { write: Approval.AUTO, exec: Approval.AUTO },
    });
    console.error(`CreateRun on kubernetes: ${Date.now() - t0} ms`);
    assert.equal(run.error, '');
    assert.equal(run.state, RunState.READY);
    runId = run.runId;
    pod = podName(runId);
    await t.alice.putFileMap(runId, { ...lspFixture('py'), ...debugFixture('python') });
  });

  after(async () => {
    if (runId) await t.alice.deleteRun(runId).catch(() => undefined);
  });

  it('is a hardened pod: security context, limits and labels as the API server holds them', async () => {
    const p = (await core.readNamespacedPod(pod, NS)).body;
    const spec = p.spec!;
    const c = spec.containers[0];
    assert.equal(spec.automountServiceAccountToken, false);
    assert.equal(spec.enableServiceLinks, false);
    assert.ok(!c.volumeMounts?.some((m) => m.mountPath.startsWith('/var/run/secrets')), 'no ServiceAccount token');
    assert.equal(spec.securityContext?.runAsNonRoot, true);
    assert.equal(spec.securityContext?.runAsUser, 1000);
    assert.equal(spec.securityContext?.seccompProfile?.type, 'RuntimeDefault');
    assert.equal(c.securityContext?.readOnlyRootFilesystem, true);
    assert.equal(c.securityContext?.allowPrivilegeEscalation, false);
    assert.equal(c.securityContext?.privileged, false);
    assert.deepEqual(c.securityContext?.capabilities?.drop, ['ALL']);
    assert.deepEqual(c.resources?.limits, { cpu: '1', memory: '2Gi', 'ephemeral-storage': '512Mi' });
    assert.equal(spec.volumes?.find((v) => v.name === 'workspace')?.emptyDir?.sizeLimit, '256Mi');
    assert.equal(spec.hostNetwork ?? false, false);
    assert.equal(p.metadata?.labels?.[LABELS.runId], runId);
    assert.equal(p.metadata?.labels?.[LABELS.tenant], 'alice');
    assert.equal(p.metadata?.labels?.[LABELS.instance], t.config.instance);
    assert.equal(p.metadata?.namespace, NS);
  });

  it("keeps the run's secret from code in the run: not in env or files, PID 1's stdin and memory closed", async () => {
    const probe = await execInPod(kc, NS, pod, 'runner', [
      'sh',
      '-c',
      'id -u; cat /proc/1/cmdline | tr "\\0" " "; echo; ' +
        'head -c1 /proc/1/fd/0 >/dev/null 2>&1 && echo stdin-open || echo stdin-closed; ' +
        'head -c1 /proc/1/mem >/dev/null 2>&1 && echo mem-open || echo mem-closed; ' +
        'cat /proc/*/environ 2>/dev/null | tr "\\0" "\\n" | grep -ci secret || true; ls -A /run/tether; ' +
        'ls /sys/class/net',
    ]);
    const lines = probe.stdout.split('\n');
    assert.equal(lines[0], '1000');
    assert.match(lines[1], /node-private .*runner\/src\/main\.bundle\.js/, 'PID 1 is the runner itself');
    assert.equal(lines[2], 'stdin-closed');
    assert.equal(lines[3], 'mem-closed');
    assert.equal(lines[4], '0');
    assert.equal(lines[5], 'runner.sock');
    assert.equal(lines[6], 'lo', 'the pod has loopback only');
  });

  it('read and write with diagnostics (pyright)', async () => {
    assert.match(await read(t.alice, runId, 'geometry/main.py'), /total_area/);
    const w = await t.alice.callTool(
      runId,
      'write',
      { path: 'geometry/bad.py', content: 'count: int = "many"\n' },
      {
        deadlineMs: 120_000,
      },
    );
    assert.equal(w.result.isError, false, resultText(w.result));
    assert.match(
      resultText(w.result),
      /new diagnostics in geometry\/bad\.py \(pyright\):\ngeometry\/bad\.py:1:14: error \[reportAssignmentType\]/,
    );
  });

  it('lsp definition', async () => {
    const r = await t.alice.callTool(
      runId,
      'lsp',
      { action: 'definition', file: 'geometry/main.py', line: 3, symbol: 'Circle' },
      { deadlineMs: 120_000 },
    );
    assert.equal(r.result.isError, false, resultText(r.result));
    assert.match(resultText(r.result), /geometry\/shapes\.py:11: class Circle\(Shape\):/);
  });

  it('ast_grep', async () => {
    const r = await t.alice.callTool(runId, 'ast_grep', { pattern: 'square($N)', language: 'python' });
    assert.equal(r.result.isError, false, resultText(r.result));
    assert.equal(JSON.parse(r.result.structuredJson).total, 1);
    assert.match(resultText(r.result), /app\.py:12/);
  });

  it('debug: launch to a breakpoint', async () => {
    const call = async (args: Record<string, unknown>) => {
      const r = await t.alice.callTool(runId, 'debug', args, { deadlineMs: 180_000 });
      assert.equal(r.result.isError, false, resultText(r.result));
      return resultText(r.result);
    };
    await call({ op: 'breakpoints', file: 'app.py', lines: [12] });
    assert.match(await call({ op: 'launch', program: 'app.py' }), /stopped \(breakpoint\) at app\.py:12 in main/);
    await call({ op: 'terminate' });
  });

  it('eval: a DataFrame becomes a table', async () => {
    const r = await t.alice.callTool(
      runId,
      'eval',
      {
        code: 'import pandas as pd\ndf = pd.DataFrame({"n": range(5), "sq": [i * i for i in range(5)]})\ndf',
        description: 'a DataFrame through the kubernetes provider',
      },
      { deadlineMs: 180_000 },
    );
    assert.equal(r.result.isError, false, resultText(r.result));
    const tables = r.result.content.flatMap((c) => (c.item.case === 'table' ? [c.item.value] : []));
    assert.equal(tables.length, 1);
    assert.deepEqual(tables[0].columns, ['', 'n', 'sq']);
    assert.deepEqual(tables[0].rows[4].cells, ['4', '4', '16']);
  });

  it('GetFiles over exec: the root without a prefix, a folder by its name, a missing path NOT_FOUND', async () => {
    const root = await tarNames(await t.alice.getFiles(runId, ''));
    assert.ok(root.includes('app.py'), root.join(' '));
    assert.ok(!root.some((n) => n.startsWith('workspace')), root.join(' '));
    const sub = await tarNames(await t.alice.getFiles(runId, 'geometry'));
    assert.ok(sub.includes('geometry/shapes.py'), sub.join(' '));
    await assert.rejects(t.alice.getFiles(runId, 'no/such/path'), (e: { code: number }) => e.code === status.NOT_FOUND);
    await assert.rejects(
      t.alice.getFiles(runId, '../etc'),
      (e: { code: number }) => e.code === status.INVALID_ARGUMENT || e.code === status.NOT_FOUND,
    );
  });

  it('PutFiles: an archive with an escaping entry, or oversized, is refused whole; good ones land where asked', async () => {
    for (const [bad, why] of [
      [{ name: '../escape.txt', size: 0 }, /leaves the workspace/],
      [{ name: 'link', type: 'symlink', linkname: '/etc' }, /absolute link/],
      [{ name: 'up', type: 'symlink', linkname: '../../..' }, /leaves the workspace/],
      [{ name: 'fifo', type: 'fifo' }, /fifo refused/],
    ] as [Partial<tarStream.Header> & { name: string }, RegExp][]) {
      await assert.rejects(
        t.alice.putFiles(
          runId,
          await tarWith([
            [{ name: 'first.txt' }, 'first'],
            [bad, ''],
          ]),
        ),
        (e: { code: number; details: string }) => e.code === status.INVALID_ARGUMENT && why.test(e.details),
      );
    }
    const first = await t.alice.callTool(runId, 'read', { path: 'first.txt' });
    assert.equal(first.result.isError, true, 'nothing of a refused archive was written');
    await assert.rejects(
      t.alice.putFiles(runId, await tarWith([[{ name: 'big.bin' }, 'x'.repeat(5 * 1024 * 1024)]])),
      (e: { code: number; details: string }) => e.code === status.RESOURCE_EXHAUSTED && /larger than/.test(e.details),
    );
    assert.equal((await t.alice.callTool(runId, 'read', { path: 'big.bin' })).result.isError, true);
    await t.alice.putFiles(runId, await tarWith([[{ name: 'x.txt' }, 'in a subdirectory']]), 'deep/er');
    assert.match(await read(t.alice, runId, 'deep/er/x.txt'), /in a subdirectory/);
    const owner = await execInPod(kc, NS, pod, 'runner', ['stat', '-c', '%u %a', '/workspace/deep/er/x.txt']);
    assert.equal(owner.stdout.trim(), '1000 644');
  });

  it("another tenant's run is NOT_FOUND", async () => {
    const notFound = (e: { code: number }) => e.code === status.NOT_FOUND;
    await assert.rejects(t.bob.getRun(runId), notFound);
    await assert.rejects(t.bob.callTool(runId, 'read', { path: 'app.py' }), notFound);
    await assert.rejects(t.bob.getFiles(runId, ''), notFound);
    await assert.rejects(t.bob.deleteRun(runId), notFound);
    assert.equal((await t.alice.getRun(runId)).state, RunState.READY);
  });
});

describe('the end of a pod ends its run', () => {
  it('a pod deleted behind the gateway: the run is FAILED with the reason, a pending call ends UNAVAILABLE', async () => {
    const run = await t.alice.createRun({ features: { eval: true }, approvals: { exec: Approval.AUTO } });
    assert.equal(run.state, RunState.READY, run.error);
    const pending = t.alice.callTool(
      run.runId,
      'eval',
      { code: 'import time\ntime.sleep(60)', description: 'a cell that outlives its pod' },
      { deadlineMs: 120_000 },
    );
    pending.catch(() => undefined);
    await new Promise((r) => setTimeout(r, 1500));
    const t0 = Date.now();
    await core.deleteNamespacedPod(podName(run.runId), NS);
    await assert.rejects(pending, (e: { code: number }) => e.code === status.UNAVAILABLE);
    assert.ok(Date.now() - t0 < 10_000, `the pending call ended ${Date.now() - t0} ms after the delete`);
    const failed = await until('the run to be FAILED', 20_000, async () => {
      const r = await t.alice.getRun(run.runId);
      return r.state === RunState.FAILED ? r : undefined;
    });
    assert.match(failed.error, /pod was deleted/);
    await t.alice.deleteRun(run.runId);
  });

  it('a workspace over its size limit: the kubelet evicts the pod, the run is FAILED with its words', async () => {
    const run = await t.alice.createRun({
      features: { eval: true },
      approvals: { exec: Approval.AUTO, write: Approval.AUTO },
      limits: { diskMb: 32 },
    });
    assert.equal(run.state, RunState.READY, run.error);
    const cell = await t.alice.callTool(
      run.runId,
      'eval',
      {
        code: 'with open("/workspace/big.bin", "wb") as f:\n    for _ in range(96):\n        f.write(b"x" * (1 << 20))\nprint("written")',
        description: 'fill the workspace past its limit',
      },
      { deadlineMs: 120_000 },
    );
    assert.match(resultText(cell.result), /written/);
    // The kubelet's eviction manager measures volumes every 10 s or so.
    const failed = await until('the run to be FAILED', 120_000, async () => {
      const r = await t.alice.getRun(run.runId);
      return r.state === RunState.FAILED ? r : undefined;
    });
    assert.match(failed.error, /evicted.*exceeds the limit|ephemeral local storage/i);
    await t.alice.deleteRun(run.runId);
  });
});

/**
 * An OOM kill of any process in a run's pod ends the run, as Kubernetes on cgroup v2 ends the
 * container: on this cluster's cgroup v1 the kernel kills only the victim, so the runner sees
 * the kill in its cgroup's counter, says what was killed in its termination message and exits.
 */
describe('an OOM kill in a pod ends its run', () => {
  const GROW = 'chunks = []\nwhile True:\n    chunks.append(b"x" * (16 << 20))';

  async function oomRun(code: string, description: string) {
    const run = await t.alice.createRun({
      features: { eval: true },
      approvals: { exec: Approval.AUTO },
      limits: { memoryMb: 512 },
    });
    assert.equal(run.state, RunState.READY, run.error);
    const t0 = Date.now();
    const call = t.alice.callTool(run.runId, 'eval', { code, description }, { deadlineMs: 120_000 });
    const outcome = await call.then(
      (out) => ({ answered: resultText(out.result) }),
      (err: { code: number; message: string }) => ({ code: err.code, message: err.message }),
    );
    // The dropped connection may fail the run first ("stopped answering"); the pod's end then
    // replaces that reason with Kubernetes'.
    let last = '';
    const failed = await until('the run to be FAILED for the OOM kill', 30_000, async () => {
      const r = await t.alice.getRun(run.runId);
      last = `${RunState[r.state]}: ${r.error}`;
      return r.state === RunState.FAILED && /\(OOM\)/.test(r.error) ? r : undefined;
    }).catch((err: Error) => assert.fail(`${err.message}; last: ${last}`));
    const pod = (await core.readNamespacedPod(podName(run.runId), NS)).body;
    const terminated = pod.status?.containerStatuses?.find((c) => c.name === 'runner')?.state?.terminated;
    console.error(`OOM after ${Date.now() - t0} ms: call ${JSON.stringify(outcome)}; run: ${failed.error}`);
    return { run, outcome, failed, terminated };
  }

  it('the eval kernel killed: the run is FAILED with OOMKilled and the kernel named, the pending eval UNAVAILABLE', async () => {
    const { run, outcome, failed, terminated } = await oomRun(GROW, 'grow past the memory limit');
    assert.equal((outcome as { code?: number }).code, status.UNAVAILABLE, JSON.stringify(outcome));
    const victim = /OOMKilled: the eval kernel \(python, pid \d+\) was killed at the run's memory limit \(512Mi\)/;
    assert.match(failed.error, /ran out of memory/);
    assert.match(failed.error, victim);
    // Kubernetes' own record of the container's end: the runner's code and words, and
    // containerd's reason for a container whose cgroup saw an OOM kill.
    assert.equal(terminated?.exitCode, OOM_EXIT_CODE);
    assert.match(terminated?.message ?? '', victim);
    assert.match(terminated?.reason ?? '', /OOMKilled|Error/);
    await t.alice.deleteRun(run.runId);
  });

  it("a process the runner did not start (a cell's subprocess) killed: FAILED with OOMKilled, the cell never answers", async () => {
    const code = `import subprocess, sys\nsubprocess.run([sys.executable, "-c", ${JSON.stringify(GROW)}])\nprint("survived")`;
    const { run, outcome, failed, terminated } = await oomRun(code, 'a subprocess grows past the memory limit');
    assert.equal((outcome as { code?: number }).code, status.UNAVAILABLE, JSON.stringify(outcome));
    assert.match(failed.error, /OOMKilled: a process in the run was killed at the run's memory limit \(512Mi\)/);
    assert.equal(terminated?.exitCode, OOM_EXIT_CODE);
    await t.alice.deleteRun(run.runId);
  });

  it('the runner itself killed (the largest process): FAILED with OOMKilled, the container named', async () => {
    // Many small processes: the OOM killer picks the largest, and the runner (node) is larger
    // than any one of them.
    const hogs = 'import time\nx = b"x" * (16 << 20)\ntime.sleep(120)';
    const code = `import subprocess, sys\nhogs = [subprocess.Popen([sys.executable, "-c", ${JSON.stringify(hogs)}]) for _ in range(40)]\nfor h in hogs:\n    h.wait()`;
    const { run, outcome, failed, terminated } = await oomRun(code, 'many small processes fill the memory');
    assert.equal((outcome as { code?: number }).code, status.UNAVAILABLE, JSON.stringify(outcome));
    assert.match(failed.error, /OOMKilled: the run's container was killed at its memory limit \(512Mi\)/);
    assert.equal(terminated?.reason, 'OOMKilled');
    assert.equal(terminated?.exitCode, 137);
    await t.alice.deleteRun(run.runId);
  });
});

describe('a template run', () => {
  const TEMPLATE = 'python-entry';
  let tpl: TestGateway | undefined;
  let runId = '';

  after(async () => {
    if (runId) await tpl?.alice.deleteRun(runId).catch(() => undefined);
    await tpl?.close();
  });

  it("is a pod of the template's image as kubernetes.templates names it, carrying what the template adds", async () => {
    const built = await buildTemplate({
      name: TEMPLATE,
      dir: path.resolve(__dirname, '../../../../test/fixtures/templates/python-entry'),
      baseImage: runnerImage(),
      builder: templateBuilder(),
    });
    // No registry here: the image goes onto the node as the runner image did.
    execFileSync('bash', [path.resolve(__dirname, '../../../../scripts/cluster.sh'), 'load-image', built.tag], {
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    tpl = await startTestGateway({
      provider: 'kubernetes',
      kubernetes: { ...kubernetesSection(NS), templates: { [TEMPLATE]: built.tag } },
      templates: { allowed: { alice: [TEMPLATE] } },
      instance: `kube-template-${process.pid}`,
      runs: { startTimeoutSeconds: 120 },
    });
    // The debug tool is a conversation's (its sessions are kept per conversation).
    const run = await tpl.alice.createRun({
      template: TEMPLATE,
      conversationId: 'kube-template',
      features: { debug: true },
      approvals: { exec: Approval.AUTO },
    });
    assert.equal(run.error, '');
    assert.equal(run.state, RunState.READY);
    runId = run.runId;
    const pod = await core.readNamespacedPod(podName(runId), NS);
    assert.equal(pod.body.spec?.containers[0].image, built.tag);
    // The adapter's root marker, so the template's declaration is usable here.
    await tpl.alice.putFileMap(runId, { 'requirements.txt': '' });
    const rows = await tpl.alice.callTool(runId, 'debug', { op: 'adapters' });
    assert.equal(rows.result.isError, false, resultText(rows.result));
    assert.match(
      resultText(rows.result),
      /^python-entry available .*declared in \/etc\/tether\/debug\.d\/python-entry\.json$/m,
    );
    await assert.rejects(tpl.bob.createRun({ template: TEMPLATE }), (err: { code?: number }) => {
      assert.equal(err.code, status.INVALID_ARGUMENT);
      return true;
    });
  });
});

describe('tether doctor for the kubernetes provider', () => {
  const config = () => ({ ...t.config, kubernetes: kubernetesSection(NS) });
  const byName = (checks: { name: string; status: string; detail: string }[]) =>
    Object.fromEntries(checks.map((c) => [c.name, c]));

  it('with the admin: the API server answers, RBAC suffices, the runner image is on the node', async () => {
    const c = byName(await diagnose(config()));
    assert.equal(c.cluster.status, 'ok', c.cluster.detail);
    assert.match(c.cluster.detail, /Kubernetes v1\.34\.\d+/);
    assert.equal(c.rbac.status, 'ok', c.rbac.detail);
    assert.equal(c.image.status, 'ok', c.image.detail);
    assert.match(c.image.detail, / on localhost$/);
  });

  it('an image no node holds, and an identity without the Role, fail with the reason', async () => {
    const missing = byName(
      await diagnose({ ...config(), kubernetes: { ...kubernetesSection(NS), image: 'tether-runner:absent' } }),
    );
    assert.equal(missing.image.status, 'fail');
    assert.match(missing.image.detail, /no node holds tether-runner:absent/);

    await core.createNamespacedServiceAccount(NS, { metadata: { name: 'nobody' } });
    const token = await core.createNamespacedServiceAccountToken('nobody', NS, {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'TokenRequest',
      spec: { audiences: [], expirationSeconds: 600 },
    });
    const file = path.join(mkdtempSync(path.join(os.tmpdir(), 'tether-kc-')), 'nobody.kubeconfig');
    writeFileSync(file, tokenConfig(kc, token.body.status!.token).exportConfig(), { mode: 0o600 });
    const c = byName(await diagnose({ ...config(), kubernetes: { ...kubernetesSection(NS), kubeconfig: file } }));
    assert.equal(c.cluster.status, 'ok', c.cluster.detail);
    assert.equal(c.rbac.status, 'fail');
    assert.match(c.rbac.detail, /not allowed in namespace .*: create pods, .*create pods\/exec, create pods\/attach/);
    assert.equal(c.image.status, 'warn', 'a least-privilege identity cannot list nodes');
  });
});
