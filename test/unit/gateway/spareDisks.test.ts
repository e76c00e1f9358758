import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { type DiskShape, SpareDisks } from '../../../gateway/src/sandbox/spareDisks';

const owner = { uid: 1000, gid: 1000 };
const shape = (sizeMb: number): DiskShape => ({ sizeMb, owner });

function maker(fail = () => false) {
  let n = 0;
  const made: string[] = [];
  const released: string[] = [];
  return {
    made,
    released,
    make: async ({ sizeMb }: DiskShape) => {
      await sleep(1);
      if (fail()) throw new Error('no loop device');
      const image = `spare-${sizeMb}-${n++}.img`;
      made.push(image);
      return { image };
    },
    release: async (d: { image: string }) => {
      released.push(d.image);
    },
  };
}

const settle = () => sleep(40);

test('a shape asked for gets its spares a moment later; a take hands one out and the refill makes another', async () => {
  const m = maker();
  const spares = new SpareDisks(2, m, 4, 5);
  assert.equal(spares.take(shape(2048)), undefined, 'none before anyone asked');
  spares.refill(shape(2048));
  assert.equal(spares.count(shape(2048)), 0, 'not made in the same turn as the start that asked');
  await settle();
  assert.equal(spares.count(shape(2048)), 2);
  assert.deepEqual(spares.take(shape(2048)), { image: 'spare-2048-0.img' });
  assert.equal(spares.take(shape(1024)), undefined, 'another size is another shape');
  spares.refill(shape(2048));
  await settle();
  assert.equal(spares.count(shape(2048)), 2);
  assert.equal(m.made.length, 3);
  await spares.close();
  assert.deepEqual(m.released.sort(), ['spare-2048-1.img', 'spare-2048-2.img']);
});

test('only the latest shapes are kept: the one not asked for longest is released', async () => {
  const m = maker();
  const spares = new SpareDisks(1, m, 2, 5);
  spares.refill(shape(1));
  spares.refill(shape(2));
  await settle();
  spares.refill(shape(3));
  await settle();
  assert.equal(spares.count(shape(1)), 0);
  assert.equal(spares.count(shape(2)), 1);
  assert.equal(spares.count(shape(3)), 1);
  assert.deepEqual(
    m.released.map((i) => i.split('-')[1]),
    ['1'],
    'the size-1 spare',
  );
  await spares.close();
});

test('a failing make stops the refill until the next start asks; none is off; close waits for a make in flight', async () => {
  let failing = true;
  const m = maker(() => failing);
  const spares = new SpareDisks(2, m, 4, 5);
  spares.refill(shape(8));
  await settle();
  assert.equal(spares.count(shape(8)), 0);
  failing = false;
  spares.refill(shape(8));
  await sleep(8);
  await spares.close();
  assert.equal(spares.count(shape(8)), 0, 'nothing is kept past close');
  assert.deepEqual(m.released.sort(), m.made.sort(), 'every spare made is released');

  const off = maker();
  const none = new SpareDisks(0, off, 4, 5);
  none.refill(shape(8));
  await settle();
  assert.deepEqual(off.made, []);
});
