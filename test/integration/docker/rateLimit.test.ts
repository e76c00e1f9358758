import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { resultText, TetherClient } from '@tether/client';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { sampleOf } from '../../helpers/otlp';
import { detailTypes } from '../../helpers/statusDetails';
import { dockerConfig, removeInstance } from './support';

// Tenant A floods CallTool past its rate limit against real runs while tenant B works: A is
// refused at the edge with retry hints, B never is, and the refusals reach the audit log and
// the metrics as counts per tenant and second, not one record each.
const instance = `rate-limit-${process.pid}`;
let t: TestGateway | undefined;
after(async () => {
  await t?.close();
  await removeInstance(instance);
});

test("docker: A's CallTool flood is refused with retry hints, B's calls never are, refusals are audited in aggregate", async () => {
  const audit = path.join(mkdtempSync(path.join(os.tmpdir(), 'tether-rate-')), 'audit.log');
  t = await startTestGateway({
    provider: 'docker',
    docker: dockerConfig(),
    instance,
    metrics: { listen: '127.0.0.1:0' },
    audit: { path: audit },
    tenancy: {
      default: {},
      tenants: { alice: { callTool: { perSecond: 5, burst: 10 } } },
      admission: { concurrency: 4 },
    },
  });
  const limits = { memoryMb: 256, diskMb: 32 };
  const a = await t.alice.createRun({ conversationId: 'flood', limits });
  const b = await t.bob.createRun({ conversationId: 'calm', limits });
  assert.equal(a.error || b.error, '');
  await t.alice.putFileMap(a.runId, { 'f.txt': 'from a\n' });
  await t.bob.putFileMap(b.runId, { 'f.txt': 'from b\n' });

  let aAnswered = 0;
  const aRefusals: grpc.ServiceError[] = [];
  const aOther: string[] = [];
  let flooding = true;
  // 100 calls in flight at all times until B is done: half on A's shared Calls stream, half
  // on a CallTool stream each.
  const ownStreams = new TetherClient(t.gateway.address, 'token-alice', { multiplex: false });
  const flood = Promise.all(
    Array.from({ length: 100 }, async (_, i) => {
      const client = i % 2 === 0 ? t!.alice : ownStreams;
      while (flooding) {
        await client.callTool(a.runId, 'read', { path: 'f.txt' }).then(
          (out) => {
            assert.match(resultText(out.result), /from a/);
            aAnswered++;
          },
          (e: grpc.ServiceError) => {
            if (e.code === grpc.status.RESOURCE_EXHAUSTED) aRefusals.push(e);
            else aOther.push(`${grpc.status[e.code]}: ${e.details}`);
          },
        );
      }
    }),
  );
  const bFailures: string[] = [];
  let bAnswered = 0;
  for (let i = 0; i < 30; i++) {
    await t.bob.callTool(b.runId, 'read', { path: 'f.txt' }).then(
      (out) => {
        assert.match(resultText(out.result), /from b/);
        bAnswered++;
      },
      (e: grpc.ServiceError) => bFailures.push(`${grpc.status[e.code]}: ${e.details}`),
    );
  }
  flooding = false;
  await flood;
  ownStreams.close();
  console.log(`# A: ${aAnswered} answered, ${aRefusals.length} refused; B: ${bAnswered} answered`);

  assert.deepEqual(bFailures, [], 'B is never refused');
  assert.equal(bAnswered, 30);
  assert.deepEqual(aOther, [], 'A is only ever refused as RESOURCE_EXHAUSTED');
  assert.ok(aAnswered >= 10, `A got at least its burst: ${aAnswered}`);
  assert.ok(aRefusals.length >= 100, `A was refused: ${aRefusals.length}`);
  for (const e of aRefusals) {
    assert.match(e.details, /tenant alice is over its callTool rate limit \(5\/s, burst 10\); retry in \d+ ms/);
    const hint = Number(e.metadata.get('retry-after-ms')[0]);
    assert.ok(hint >= 1 && hint <= 200, `retry-after-ms ${hint} is within one token's time at 5/s`);
  }
  // A CallTool refusal carries the rich status too (a Calls refusal has only its retry_after_ms).
  const rich = aRefusals.find((e) => e.metadata.get('grpc-status-details-bin').length > 0);
  assert.ok(rich, 'a refused CallTool stream has grpc-status-details-bin');
  const d = detailTypes(rich.metadata);
  assert.equal(d.code, grpc.status.RESOURCE_EXHAUSTED);
  assert.deepEqual(d.types, ['type.googleapis.com/google.rpc.RetryInfo']);

  // Everything counted so far is reported now, as the window's end would.
  t.gateway.tenancy.flushRefusals();
  type AuditLine = { event: string; tenant?: string; refused?: number; outcome?: string };
  const read = () =>
    readFileSync(audit, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as AuditLine);
  const refusedIn = (rs: AuditLine[]) =>
    rs.filter((r) => r.event === 'rate.limited').reduce((n, r) => n + (r.refused ?? 0), 0);
  // The audit file is written through a stream: give its last lines the time to land.
  let records = read();
  for (let i = 0; i < 100 && refusedIn(records) < aRefusals.length; i++) {
    await new Promise((r) => setTimeout(r, 50));
    records = read();
  }
  const limited = records.filter((r) => r.event === 'rate.limited');
  assert.ok(
    limited.every((r) => r.tenant === 'alice'),
    'only A has refusals',
  );
  assert.equal(refusedIn(records), aRefusals.length, 'every refusal is counted in the aggregate records');
  assert.ok(limited.length < aRefusals.length / 10, `${limited.length} records for ${aRefusals.length} refusals`);
  const calls = records.filter((r) => r.event === 'tool.call');
  assert.equal(calls.filter((r) => r.tenant === 'alice').length, aAnswered, 'a refused call is not a tool.call record');
  assert.equal(calls.filter((r) => r.tenant === 'bob').length, 30);
  const text = await (await fetch(`http://${t.gateway.metricsAddress}/metrics`)).text();
  assert.equal(sampleOf(text, 'tether_rate_limited_total', { tenant: 'alice', kind: 'callTool' }), aRefusals.length);
});
