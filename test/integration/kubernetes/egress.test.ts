/**
 * Egress of a kubernetes run on the project's cluster: the pod has loopback-only networking,
 * and its connections are carried over an exec'd carrier to the gateway's allow-list proxy,
 * which reaches a stand-in package index on this machine's loopback (egress.testHosts).
 * The same policy, log and audit as a Docker run's.
 */
import * as k8s from '@kubernetes/client-node';
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Approval, RunState } from '@tether/contract';
import { resultText } from '../../../clients/typescript/src';
import { defaultConfig } from '../../../gateway/src/config';
import { readEgressLog } from '../../../gateway/src/egress/log';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { runnerImage } from '../docker/support';
import { PACKAGE, PACKAGE_VALUE, startStandInIndex, type StandInIndex } from '../egress/standIn';
import { adminConfig, adminConfigFile, deleteNamespace, runsNamespace } from './support';

const NS = `tether-runs-e${process.pid}`;
const core = adminConfig().makeApiClient(k8s.CoreV1Api);
const ALLOWED = 'pypi.allowed.test';
const REFUSED = 'pypi.refused.test';
const auditPath = path.join(os.tmpdir(), `tether-k8s-egress-audit-${process.pid}.jsonl`);
let index: StandInIndex;
let t: TestGateway;
let runId = '';

before(async () => {
  await runsNamespace(core, NS);
  index = await startStandInIndex();
  t = await startTestGateway({
    provider: 'kubernetes',
    kubernetes: { ...defaultConfig().kubernetes, namespace: NS, kubeconfig: adminConfigFile(), image: runnerImage() },
    limits: { default: { memoryMb: 1024, cpuMillis: 1000, pids: 512, diskMb: 512 } },
    runs: { startTimeoutSeconds: 120 },
    egress: {
      allowed: { alice: [`${ALLOWED}:${index.port}`] },
      testHosts: { [ALLOWED]: '127.0.0.1', [REFUSED]: '127.0.0.1' },
    },
    audit: { path: auditPath },
  });
});

after(async () => {
  if (runId) await t?.alice.deleteRun(runId).catch(() => undefined);
  await t?.close();
  await index?.close();
  await deleteNamespace(core, NS);
  await fs.rm(auditPath, { force: true });
});

async function cell(code: string): Promise<{ text: string; isError: boolean }> {
  const r = await t.alice.callTool(
    runId,
    'eval',
    { code, description: 'a cell for the kubernetes egress tests' },
    { deadlineMs: 180_000 },
  );
  return { text: resultText(r.result), isError: r.result.isError };
}

test('a kubernetes run granted egress: pip installs from the allowed index through the carried proxy', async () => {
  const run = await t.alice.createRun({
    features: { eval: true },
    approvals: { exec: Approval.AUTO },
    egress: { allow: [] },
  });
  runId = run.runId;
  assert.equal(run.state, RunState.READY, run.error);
  assert.deepEqual(run.egress?.allow, [`${ALLOWED}:${index.port}`]);

  const install = await cell(
    `%pip install --index-url http://${ALLOWED}:${index.port}/simple --trusted-host ${ALLOWED} ${PACKAGE}`,
  );
  assert.equal(install.isError, false, install.text);
  assert.match(install.text, new RegExp(`Successfully installed ${PACKAGE}-0\\.1`));
  const use = await cell(`import ${PACKAGE}\nprint(${PACKAGE}.VALUE)`);
  assert.match(use.text, new RegExp(PACKAGE_VALUE));
  assert.ok(index.seen.includes(`/simple/${PACKAGE}/`), `the index saw: ${index.seen.join(', ')}`);

  await new Promise((r) => setTimeout(r, 300));
  const log = await readEgressLog(path.join(t.config.stateDir, 'egress-log'), 'alice', runId);
  const got = log.filter((r) => r.host === ALLOWED && r.allowed);
  assert.ok(got.length >= 2, JSON.stringify(log));
  assert.ok(got.some((r) => r.bytesIn > 500));
});

test('from a kubernetes run, a refused host and a direct socket fail; the log and the audit show the refusal', async () => {
  assert.ok(runId, 'needs the run of the previous test');
  const before = index.seen.length;
  const probes = await cell(
    [
      'import socket, urllib.request, urllib.error',
      `for url in ['http://${REFUSED}:${index.port}/simple/', 'http://192.0.2.10/simple/']:`,
      '    try:',
      '        urllib.request.urlopen(url, timeout=5)',
      "        print('REACHED', url)",
      '    except urllib.error.HTTPError as e:',
      "        print('HTTP', e.code, e.reason)",
      `for addr in [('192.0.2.10', 80), ('127.0.0.1', ${index.port})]:`,
      '    try:',
      '        socket.create_connection(addr, timeout=3).close()',
      "        print('CONNECTED', addr)",
      '    except OSError as e:',
      "        print('SOCKET', addr[0], e.strerror)",
    ].join('\n'),
  );
  assert.equal(probes.isError, false, probes.text);
  assert.doesNotMatch(probes.text, /REACHED|CONNECTED/);
  assert.match(
    probes.text,
    new RegExp(`HTTP 403 tether egress: ${REFUSED}:${index.port} is not on the egress allow-list`),
  );
  assert.match(probes.text, /HTTP 403 tether egress: 192\.0\.2\.10 is an IP address/);
  // The pod's own loopback, not this machine's: nothing listens there.
  assert.match(probes.text, /SOCKET 127\.0\.0\.1 Connection refused/);
  assert.match(probes.text, /SOCKET 192\.0\.2\.10 (Network is unreachable|No route to host)/);
  assert.equal(index.seen.length, before, 'nothing refused reached the index');

  await new Promise((r) => setTimeout(r, 300));
  const audited = (await fs.readFile(auditPath, 'utf8'))
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l))
    .filter((e) => e.event === 'egress' && e.runId === runId);
  const refused = audited.find((e) => e.host === REFUSED);
  assert.equal(refused?.allowed, false, JSON.stringify(audited));
  assert.match(refused?.reason ?? '', /is not on the egress allow-list/);
});
