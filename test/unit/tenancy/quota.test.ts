import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import { policyFor, defaultTenancy } from '../../../gateway/src/tenancy/config';
import { exceededQuota } from '../../../gateway/src/tenancy/quota';
import { Tenancy } from '../../../gateway/src/tenancy/Tenancy';
import type { RefusalReport } from '../../../gateway/src/tenancy/RefusalTally';
import { ResourceExhausted } from '../../../gateway/src/tenancy/statusDetails';
import { detailTypes } from '../../helpers/statusDetails';

const policy = { ...policyFor(defaultTenancy(), 't', 3), memoryMb: 1024, cpuMillis: 2000, diskMb: 512 };
const run = { memoryMb: 256, cpuMillis: 500, diskMb: 128 };

test('each quota admits a run that lands exactly on its limit and refuses one unit more', () => {
  const at = { liveRuns: 2, memoryMb: 768, cpuMillis: 1500, diskMb: 384 };
  assert.equal(exceededQuota(policy, at, run), undefined, 'every total lands exactly on its limit');
  for (const [quota, over] of [
    ['liveRuns', { ...at, liveRuns: 3 }],
    ['memoryMb', { ...at, memoryMb: 769 }],
    ['cpuMillis', { ...at, cpuMillis: 1501 }],
    ['diskMb', { ...at, diskMb: 385 }],
  ] as const) {
    const v = exceededQuota(policy, over, run);
    assert.equal(v?.quota, quota);
    assert.equal(v?.limit, policy[quota]);
    assert.equal(v?.inUse, over[quota]);
  }
});

test('a per-tenant override replaces only what it names; liveRuns defaults to runs.maxPerTenant', () => {
  const cfg = {
    ...defaultTenancy(),
    default: { memoryMb: 4096, callTool: { perSecond: 5, burst: 10 } },
    tenants: { big: { memoryMb: 8192, callTool: { perSecond: 50 } } },
  };
  const small = policyFor(cfg, 'small', 7);
  const big = policyFor(cfg, 'big', 7);
  assert.equal(small.liveRuns, 7);
  assert.equal(small.memoryMb, 4096);
  assert.equal(big.memoryMb, 8192);
  assert.deepEqual(big.callTool, { perSecond: 50, burst: 10 });
  assert.deepEqual(small.createRun, { perSecond: 10, burst: 50 });
});

test('a rate-limited call is RESOURCE_EXHAUSTED with retry-after-ms and a google.rpc.RetryInfo', () => {
  const now = 0;
  const t = new Tenancy({ ...defaultTenancy(), default: { callTool: { perSecond: 0.8, burst: 1 } } }, 10, () => now);
  t.limitRate('a', 'callTool');
  let err: unknown;
  try {
    t.limitRate('a', 'callTool');
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof ResourceExhausted);
  assert.equal(err.code, status.RESOURCE_EXHAUSTED);
  assert.match(err.message, /callTool rate limit.*retry in 1250 ms/);
  assert.equal(err.metadata!.get('retry-after-ms')[0], '1250');
  const d = detailTypes(err.metadata!);
  assert.equal(d.code, status.RESOURCE_EXHAUSTED);
  assert.deepEqual(d.types, ['type.googleapis.com/google.rpc.RetryInfo']);
  assert.equal(d.retrySeconds, 1);
  assert.equal(d.retryNanos, 250_000_000);
  // Another tenant, and the same tenant's other kind, have their own buckets.
  t.limitRate('b', 'callTool');
  t.limitRate('a', 'createRun');
});

test('a quota refusal names the quota, its limit and the use, with a google.rpc.QuotaFailure', () => {
  const t = new Tenancy({ ...defaultTenancy(), default: { memoryMb: 1024 } }, 10);
  const limits = { memoryMb: 512, cpuMillis: 100, pids: 64, diskMb: 64 };
  t.checkQuota('a', { liveRuns: 1, memoryMb: 512, cpuMillis: 100, diskMb: 64 }, limits);
  assert.throws(
    () => t.checkQuota('a', { liveRuns: 2, memoryMb: 1024, cpuMillis: 200, diskMb: 128 }, limits),
    (e: unknown) => {
      assert.ok(e instanceof ResourceExhausted);
      assert.match(e.message, /memoryMb quota: limit 1024 MiB, in use 1024 MiB, this run asks 512 MiB/);
      assert.deepEqual(detailTypes(e.metadata!).types, ['type.googleapis.com/google.rpc.QuotaFailure']);
      return true;
    },
  );
});

test('refusals are made once per retry hint and reused; each is counted and reported per tenant and window', async () => {
  let now = 0;
  const t = new Tenancy({ ...defaultTenancy(), default: { callTool: { perSecond: 10, burst: 1 } } }, 10, () => now);
  const reports: RefusalReport[] = [];
  t.onRefusals((r) => reports.push(r));
  assert.equal(t.refusal('a', 'callTool'), undefined);
  const first = t.refusal('a', 'callTool');
  assert.ok(first);
  assert.equal(first.metadata!.get('retry-after-ms')[0], '100');
  assert.equal(t.refusal('a', 'callTool'), first, 'the same hint: the same status, made once');
  now = 50;
  const later = t.refusal('a', 'callTool');
  assert.ok(later && later !== first);
  assert.equal(later.metadata!.get('retry-after-ms')[0], '50');
  assert.equal(t.refusal('b', 'callTool'), undefined, "another tenant's bucket is its own");
  assert.equal(reports.length, 0, 'nothing is reported per refusal');
  t.flushRefusals();
  assert.deepEqual(
    reports.map((r) => [r.tenant, r.kind, r.refused]),
    [['a', 'callTool', 3]],
  );
  t.flushRefusals();
  assert.equal(reports.length, 1, 'an empty window reports nothing');
  t.refusal('a', 'callTool');
  t.flushRefusals();
  assert.deepEqual(reports[1] && [reports[1].tenant, reports[1].refused], ['a', 1]);
});

test('the refusal report comes by itself once the window is over', async () => {
  const reports: RefusalReport[] = [];
  const t = new Tenancy({ ...defaultTenancy(), default: { callTool: { perSecond: 0.001, burst: 1 } } }, 10);
  t.onRefusals((r) => reports.push(r));
  t.refusal('a', 'callTool');
  for (let i = 0; i < 100; i++) t.refusal('a', 'callTool');
  await new Promise((r) => setTimeout(r, 1200));
  assert.equal(reports.length, 1);
  assert.equal(reports[0].refused, 100);
  // A timer and the wall clock round apart by up to a millisecond: 999 ms is a whole window.
  assert.ok(reports[0].windowMs >= 998, `window ${reports[0].windowMs} ms`);
});
