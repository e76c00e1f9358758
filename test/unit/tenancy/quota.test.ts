import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status, type Metadata } from '@grpc/grpc-js';
import { BinaryReader } from '@bufbuild/protobuf/wire';
import { policyFor, defaultTenancy } from '../../../gateway/src/tenancy/config';
import { exceededQuota } from '../../../gateway/src/tenancy/quota';
import { Tenancy } from '../../../gateway/src/tenancy/Tenancy';
import { ResourceExhausted } from '../../../gateway/src/tenancy/statusDetails';

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

/** Reads the google.rpc.Status in grpc-status-details-bin: the type URLs of its details. */
function detailTypes(md: Metadata): { code: number; types: string[]; retrySeconds?: number; retryNanos?: number } {
  const bin = md.get('grpc-status-details-bin')[0] as Buffer;
  const r = new BinaryReader(bin);
  const out: ReturnType<typeof detailTypes> = { code: -1, types: [] };
  while (r.pos < r.len) {
    const [field] = r.tag();
    if (field === 1) out.code = r.int32();
    else if (field === 2) r.string();
    else if (field === 3) {
      const any = new BinaryReader(r.bytes());
      let type = '';
      let value: Uint8Array = new Uint8Array();
      while (any.pos < any.len) {
        const [f] = any.tag();
        if (f === 1) type = any.string();
        else value = any.bytes();
      }
      out.types.push(type);
      if (type.endsWith('RetryInfo')) {
        const d = new BinaryReader(value);
        d.tag();
        const dur = new BinaryReader(d.bytes());
        while (dur.pos < dur.len) {
          const [g] = dur.tag();
          if (g === 1) out.retrySeconds = Number(dur.int64());
          else out.retryNanos = dur.int32();
        }
      }
    }
  }
  return out;
}

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
