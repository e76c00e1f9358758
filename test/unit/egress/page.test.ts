import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import type { EgressRecord } from '../../../gateway/src/egress/log';
import { pageOf } from '../../../gateway/src/egress/page';
import { egressPageToProto } from '../../../gateway/src/egress/proto';

const record = (i: number): EgressRecord => ({
  time: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString(),
  runId: 'run-1',
  tenant: 'alice',
  method: 'CONNECT',
  host: `h${i}.test`,
  port: 443,
  allowed: i % 2 === 0,
  reason: i % 2 ? 'not on the list' : undefined,
  address: i % 2 ? undefined : '127.0.0.1',
  bytesOut: i,
  bytesIn: 10 * i,
  durationMs: 3,
});

test('egress log pages: tokens are positions, the last page has none, bad input is INVALID_ARGUMENT', () => {
  const all = Array.from({ length: 5 }, (_, i) => record(i));
  const first = pageOf(all, 2, '');
  assert.deepEqual(
    first.records.map((r) => r.host),
    ['h0.test', 'h1.test'],
  );
  assert.equal(first.next, '2');
  const last = pageOf(all, 2, '4');
  assert.deepEqual(
    last.records.map((r) => r.host),
    ['h4.test'],
  );
  assert.equal(last.next, '');
  assert.equal(pageOf(all, 0, '').records.length, 5, 'page size 0 means the default');
  assert.equal(pageOf(all, 100_000, '').records.length, 5);
  assert.deepEqual(pageOf(all, 2, '99'), { records: [], next: '' });
  assert.throws(
    () => pageOf(all, 2, 'abc'),
    (e: { code: number; message: string }) => e.code === status.INVALID_ARGUMENT && /page_token "abc"/.test(e.message),
  );
  assert.throws(() => pageOf(all, -1, ''), /page_size must not be negative/);
});

test('egress records on the wire: the tenant stays out, absent fields are empty', () => {
  const wire = egressPageToProto({ records: [record(1), record(2)], next: '2' });
  assert.equal(wire.nextPageToken, '2');
  const [refused, allowed] = wire.records;
  assert.equal(refused.reason, 'not on the list');
  assert.equal(refused.address, '');
  assert.equal(allowed.address, '127.0.0.1');
  assert.equal(allowed.bytesIn, 20n);
  assert.equal(allowed.time?.seconds, BigInt(Date.UTC(2026, 0, 1, 0, 0, 2) / 1000));
  assert.equal('tenant' in allowed, false);
});
