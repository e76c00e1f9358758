import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { status, type ServiceError } from '@grpc/grpc-js';
import { Approval, RunState } from '@tether/contract';
import { resultText } from '@tether/client';
import { readEgressLog, type EgressRecord } from '../../../gateway/src/egress/log';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { PACKAGE, PACKAGE_VALUE, startStandInIndex, type StandInIndex } from './standIn';

/**
 * Egress through the gateway's allow-list proxy, against a stand-in internet on loopback: a
 * package index reached as `pypi.allowed.test`, and the same server as `pypi.refused.test`,
 * which is not on the list. Both names are mapped to 127.0.0.1 by egress.testHosts; nothing
 * leaves this machine (the IP literal and the direct socket use 192.0.2.10, a documentation
 * address the proxy refuses and the run has no route to).
 */
const ALLOWED = 'pypi.allowed.test';
const REFUSED = 'pypi.refused.test';
const auditPath = path.join(os.tmpdir(), `tether-egress-audit-${process.pid}.jsonl`);
let index: StandInIndex;
let t: TestGateway;
let runId = '';
let plainRunId = '';
const timings: string[] = [];

before(async () => {
  index = await startStandInIndex();
  t = await startTestGateway({
    provider: 'docker',
    egress: {
      allowed: { alice: [`${ALLOWED}:${index.port}`] },
      testHosts: { [ALLOWED]: '127.0.0.1', [REFUSED]: '127.0.0.1' },
    },
    audit: { path: auditPath },
  });
});

after(async () => {
  for (const id of [runId, plainRunId]) if (id) await t.alice.deleteRun(id).catch(() => undefined);
  await t?.close();
  await index?.close();
  await fs.rm(auditPath, { force: true });
  console.error(timings.join('\n'));
});

async function cell(code: string): Promise<{ text: string; isError: boolean }> {
  const r = await t.alice.callTool(
    runId,
    'eval',
    { code, description: 'run a cell for the egress tests' },
    { deadlineMs: 120_000 },
  );
  return { text: resultText(r.result), isError: r.result.isError };
}

async function logOf(id: string): Promise<EgressRecord[]> {
  // Records are appended as each connection closes.
  await new Promise((r) => setTimeout(r, 300));
  return readEgressLog(path.join(t.config.stateDir, 'egress-log'), 'alice', id);
}

test('CreateRun: egress beyond the tenant allow-list is refused, naming what is allowed', async () => {
  await assert.rejects(t.bob.createRun({ features: { eval: true }, egress: { allow: [] } }), (err: ServiceError) => {
    assert.equal(err.code, status.INVALID_ARGUMENT);
    assert.match(err.details, /egress is not allowed for this tenant \(allowed hosts: none\)/);
    return true;
  });
  await assert.rejects(
    t.alice.createRun({ features: { eval: true }, egress: { allow: [`${REFUSED}:443`] } }),
    (err: ServiceError) => {
      assert.equal(err.code, status.INVALID_ARGUMENT);
      assert.match(
        err.details,
        new RegExp(
          `egress entry ${REFUSED}:443 is not within what this tenant may reach \\(allowed hosts: ${ALLOWED}:${index.port}\\)`,
        ),
      );
      return true;
    },
  );
  await assert.rejects(t.alice.createRun({ egress: { allow: ['192.0.2.10:80'] } }), /is an IP address/);
  assert.deepEqual(await t.alice.listRuns(), []);
});

test('a run granted egress: pip installs from the allowed index through the proxy', async () => {
  let t0 = Date.now();
  const plain = await t.alice.createRun({ features: { eval: true } });
  timings.push(`CreateRun without egress: ${Date.now() - t0} ms`);
  plainRunId = plain.runId;
  t0 = Date.now();
  const run = await t.alice.createRun({
    features: { eval: true },
    approvals: { exec: Approval.AUTO },
    egress: { allow: [] },
  });
  timings.push(`CreateRun with egress: ${Date.now() - t0} ms`);
  runId = run.runId;
  assert.equal(run.error, '');
  assert.equal(run.state, RunState.READY);
  assert.deepEqual(run.egress?.allow, [`${ALLOWED}:${index.port}`]);

  const install = await cell(
    `%pip install --index-url http://${ALLOWED}:${index.port}/simple --trusted-host ${ALLOWED} ${PACKAGE}`,
  );
  assert.equal(install.isError, false, install.text);
  assert.match(install.text, new RegExp(`Successfully installed ${PACKAGE}-0\\.1`));
  const use = await cell(`import ${PACKAGE}\nprint(${PACKAGE}.VALUE)`);
  assert.equal(use.isError, false, use.text);
  assert.match(use.text, new RegExp(PACKAGE_VALUE));
  assert.ok(index.seen.includes(`/simple/${PACKAGE}/`), `the index saw: ${index.seen.join(', ')}`);
  assert.ok(index.seen.some((p) => p.startsWith('/packages/')));

  const log = await logOf(runId);
  const got = log.filter((r) => r.host === ALLOWED && r.allowed);
  assert.ok(got.length >= 2, JSON.stringify(log));
  assert.ok(got.every((r) => r.port === index.port && r.address === '127.0.0.1' && r.method === 'GET'));
  assert.ok(
    got.some((r) => r.bytesIn > 500),
    JSON.stringify(got),
  );
});

test('a refused host, another port, an IP literal and a direct socket all fail, and the log shows the attempts', async () => {
  assert.ok(runId, 'needs the run of the previous test');
  const before = index.seen.length;
  const refused = await cell(`%pip install --index-url https://${REFUSED}/simple ${PACKAGE}-absent`);
  assert.equal(refused.isError, true, refused.text);
  assert.match(refused.text, new RegExp(`${REFUSED}:443 is not on the egress allow-list of this run`));
  assert.match(refused.text, new RegExp(`This run's egress allow-list: ${ALLOWED}:${index.port}`));

  const probes = await cell(
    [
      'import socket, urllib.request, urllib.error',
      `for url in ['http://192.0.2.10/simple/', 'http://${ALLOWED}:${index.port + 1}/simple/', 'http://[::1]:${index.port}/']:`,
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
    /HTTP 403 tether egress: 192\.0\.2\.10 is an IP address; the egress allow-list admits host names only/,
  );
  assert.match(
    probes.text,
    new RegExp(`HTTP 403 tether egress: ${ALLOWED}:${index.port + 1} is not on the egress allow-list of this run`),
  );
  assert.match(probes.text, /HTTP 403 tether egress: ::1 is an IP address/);
  assert.match(probes.text, /SOCKET 192\.0\.2\.10 Network is unreachable/);
  assert.match(probes.text, /SOCKET 127\.0\.0\.1 Connection refused/);
  assert.equal(index.seen.length, before, 'nothing refused reached the index');

  const log = await logOf(runId);
  const refusals = log.filter((r) => !r.allowed);
  const find = (host: string, port: number) => refusals.find((r) => r.host === host && r.port === port);
  assert.equal(find(REFUSED, 443)?.method, 'CONNECT', JSON.stringify(refusals));
  assert.match(find('192.0.2.10', 80)?.reason ?? '', /is an IP address/);
  assert.ok(find(ALLOWED, index.port + 1));
  assert.ok(find('::1', index.port) ?? find('[::1]', index.port), JSON.stringify(refusals));
  assert.ok(refusals.every((r) => r.bytesIn === 0 && r.bytesOut === 0 && r.runId === runId && r.tenant === 'alice'));
  // The operator's audit log holds the same requests, without paths or headers.
  const audited = (await fs.readFile(auditPath, 'utf8'))
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l))
    .filter((e) => e.event === 'egress' && e.runId === runId);
  assert.equal(audited.length, log.length, JSON.stringify(audited));
  const refusedAudit = audited.find((e) => e.host === REFUSED && e.port === 443);
  assert.equal(refusedAudit?.allowed, false);
  assert.equal(refusedAudit?.tenant, 'alice');
  assert.match(refusedAudit?.reason ?? '', /is not on the egress allow-list/);
  assert.ok(audited.some((e) => e.allowed && e.host === ALLOWED && e.bytesIn > 0));
});

test('a run without egress has no proxy: pip says the run has no network', async () => {
  assert.ok(plainRunId);
  const r = await t.alice.callTool(
    plainRunId,
    'eval',
    {
      code: `%pip install --index-url http://${ALLOWED}:${index.port}/simple ${PACKAGE}`,
      description: 'run a cell for the egress tests',
    },
    { deadlineMs: 120_000 },
  );
  assert.equal(r.result.isError, true);
  assert.match(resultText(r.result), /this run has no network access/);
  assert.deepEqual(await logOf(plainRunId), []);
});

test('a tenant reads its own egress log over gRPC, in pages; another tenant sees none of it', async () => {
  assert.ok(runId);
  const onDisk = await logOf(runId);
  assert.ok(onDisk.length >= 4, JSON.stringify(onDisk));
  const page = await t.alice.getEgressLog({ runId });
  assert.equal(page.records.length, onDisk.length);
  assert.equal(page.nextPageToken, '');
  const first = page.records[0];
  assert.equal(first.runId, runId);
  assert.equal(first.host, onDisk[0].host);
  assert.equal(first.port, onDisk[0].port);
  assert.equal(first.allowed, onDisk[0].allowed);
  assert.equal(Number(first.bytesIn), onDisk[0].bytesIn);
  assert.equal(first.time?.seconds, BigInt(Math.floor(Date.parse(onDisk[0].time) / 1000)));
  const refusal = page.records.find((r) => !r.allowed && r.host === REFUSED);
  assert.match(refusal?.reason ?? '', /is not on the egress allow-list of this run/);

  // Page by page, the same records in the same order.
  const paged = [];
  let pageToken = '';
  let pages = 0;
  do {
    const p = await t.alice.getEgressLog({ runId, pageSize: 2, pageToken });
    assert.ok(p.records.length <= 2);
    paged.push(...p.records);
    pageToken = p.nextPageToken;
    pages++;
  } while (pageToken);
  assert.equal(pages, Math.ceil(onDisk.length / 2));
  assert.deepEqual(
    paged.map((r) => `${r.method} ${r.host}:${r.port} ${r.allowed}`),
    onDisk.map((r) => `${r.method} ${r.host}:${r.port} ${r.allowed}`),
  );
  const all = [];
  for await (const r of t.alice.egressLog()) all.push(r);
  assert.ok(all.length >= onDisk.length);
  assert.ok(all.every((r) => r.runId === runId || r.runId === plainRunId));

  assert.deepEqual((await t.bob.getEgressLog({ runId })).records, []);
  assert.deepEqual((await t.bob.getEgressLog({})).records, []);
  await assert.rejects(t.alice.getEgressLog({ runId, pageToken: 'x' }), (err: ServiceError) => {
    assert.equal(err.code, status.INVALID_ARGUMENT);
    assert.match(err.details, /page_token "x" is not one this gateway gave out/);
    return true;
  });
});

test('after a gateway restart, a run with egress reaches the allowed index again', async () => {
  assert.ok(runId);
  const { instance, stateDir } = t.config;
  t.alice.close();
  t.bob.close();
  await t.gateway.close({ keepRuns: true });
  t = await startTestGateway({
    provider: 'docker',
    instance,
    stateDir,
    egress: {
      allowed: { alice: [`${ALLOWED}:${index.port}`] },
      testHosts: { [ALLOWED]: '127.0.0.1', [REFUSED]: '127.0.0.1' },
    },
  });
  const run = await t.alice.getRun(runId);
  assert.equal(run.state, RunState.READY, run.error);
  const seen = index.seen.length;
  const again = await cell(
    `%pip install --force-reinstall --no-deps --index-url http://${ALLOWED}:${index.port}/simple --trusted-host ${ALLOWED} ${PACKAGE}`,
  );
  assert.equal(again.isError, false, again.text);
  assert.match(again.text, new RegExp(`Successfully installed ${PACKAGE}-0\\.1`));
  assert.ok(index.seen.length > seen, 'the index was reached after the restart');
  const refused = await cell(`%pip install --index-url https://${REFUSED}/simple ${PACKAGE}-absent`);
  assert.match(refused.text, new RegExp(`This run's egress allow-list: ${ALLOWED}:${index.port}`));
});
