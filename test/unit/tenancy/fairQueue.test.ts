import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FairQueue, QueueFullError } from '../../../gateway/src/tenancy/FairQueue';

const tick = () => new Promise((r) => setImmediate(r));

/** A task that finishes when the test says so, recording the order tasks started in. */
function gate(order: string[], name: string) {
  let open!: () => void;
  const done = new Promise<void>((r) => (open = r));
  return { task: () => (order.push(name), done.then(() => name)), open: () => open() };
}

test('at most `concurrency` tasks run at once', async () => {
  const q = new FairQueue(2);
  const order: string[] = [];
  const gates = ['a1', 'a2', 'a3', 'a4'].map((n) => gate(order, n));
  const all = gates.map((g) => q.submit('a', 10, g.task));
  await tick();
  assert.deepEqual(order, ['a1', 'a2']);
  assert.equal(q.active, 2);
  assert.equal(q.waitingFor('a'), 2);
  gates[0].open();
  await tick();
  await tick();
  assert.deepEqual(order, ['a1', 'a2', 'a3']);
  gates.forEach((g) => g.open());
  assert.deepEqual(await Promise.all(all), ['a1', 'a2', 'a3', 'a4']);
  assert.equal(q.active, 0);
});

test("tenant B's one task starts after at most one more of A's 50", async () => {
  const q = new FairQueue(2);
  const order: string[] = [];
  // Tasks end on their own a moment after they start, like real creates.
  const task = (name: string) => () => (order.push(name), new Promise((r) => setTimeout(r, 1)));
  const a = Array.from({ length: 50 }, (_, i) => q.submit('a', 64, task(`a${i}`)));
  const b = q.submit('b', 64, task('b0'));
  await Promise.all([...a, b]);
  // a0 and a1 took the free slots; then turns alternate: a2, then b0.
  assert.equal(order.indexOf('b0'), 3, order.slice(0, 6).join(','));
  assert.equal(order.length, 51);
});

test('turns go round robin across three tenants, first come first served within one', async () => {
  const q = new FairQueue(1);
  const order: string[] = [];
  const blocker = gate(order, 'x');
  const held = q.submit('x', 10, blocker.task);
  const done: Promise<unknown>[] = [];
  for (const [t, n] of [
    ['a', 3],
    ['b', 2],
    ['c', 1],
  ] as const)
    for (let i = 0; i < n; i++) done.push(q.submit(t, 10, async () => order.push(`${t}${i}`)));
  blocker.open();
  await Promise.all([held, ...done]);
  assert.deepEqual(order, ['x', 'a0', 'b0', 'c0', 'a1', 'b1', 'a2']);
});

test('a full line is refused at once, without running or queuing the task; a free slot is never refused', async () => {
  const q = new FairQueue(1);
  const order: string[] = [];
  const first = gate(order, 'a0');
  const p0 = q.submit('a', 0, first.task); // a slot is free: runs though no waiting is allowed
  const p1 = q.submit('a', 1, async () => order.push('a1'));
  let ran = false;
  assert.throws(
    () => q.submit('a', 1, async () => (ran = true)),
    (e: unknown) => e instanceof QueueFullError && /queuedCreates.* 1/.test((e as Error).message),
  );
  // Another tenant's line is its own.
  const pb = q.submit('b', 1, async () => order.push('b0'));
  first.open();
  await Promise.all([p0, p1, pb]);
  assert.equal(ran, false);
  assert.deepEqual(order, ['a0', 'a1', 'b0']);
});

test('a failing or throwing task frees its slot and rejects only its own caller', async () => {
  const q = new FairQueue(1);
  const bad = q.submit('a', 5, async () => {
    throw new Error('engine said no');
  });
  const worse = q.submit('a', 5, () => {
    throw new Error('sync throw');
  });
  const good = q.submit('a', 5, async () => 'ok');
  await assert.rejects(bad, /engine said no/);
  await assert.rejects(worse, /sync throw/);
  assert.equal(await good, 'ok');
  assert.equal(q.active, 0);
});
