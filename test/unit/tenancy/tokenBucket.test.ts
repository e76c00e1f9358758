import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TokenBucket } from '../../../gateway/src/tenancy/TokenBucket';

test('a bucket gives its burst at once, then refuses with the wait until the next token', () => {
  let now = 0;
  const b = new TokenBucket({ perSecond: 10, burst: 3 }, () => now);
  assert.deepEqual([b.take(), b.take(), b.take()], [0, 0, 0]);
  assert.equal(b.take(), 100, 'one token every 100 ms at 10/s');
  now = 50;
  assert.equal(b.take(), 50);
  now = 100;
  assert.equal(b.take(), 0);
  assert.ok(b.take() > 0);
});

test('a quiet bucket refills only up to its burst', () => {
  let now = 0;
  const b = new TokenBucket({ perSecond: 1000, burst: 2 }, () => now);
  b.take();
  b.take();
  now = 60_000;
  assert.deepEqual([b.take(), b.take()], [0, 0]);
  assert.ok(b.take() > 0);
});

test('a fractional rate gives a wait of whole milliseconds', () => {
  let now = 0;
  const b = new TokenBucket({ perSecond: 0.5, burst: 1 }, () => now);
  assert.equal(b.take(), 0);
  assert.equal(b.take(), 2000);
  now = 1999;
  assert.equal(b.take(), 1);
  now = 2000;
  assert.equal(b.take(), 0);
});
