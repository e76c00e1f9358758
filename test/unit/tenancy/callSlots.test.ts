import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CallSlots } from '../../../gateway/src/tenancy/CallSlots';

test('calls past the limit wait in line, first come first served, and a full line refuses', () => {
  const slots = new CallSlots(2, 2);
  const began: string[] = [];
  const releases = new Map<string, () => void>();
  const enter = (name: string) =>
    slots.enter((release) => {
      began.push(name);
      releases.set(name, release);
    });
  assert.ok(enter('a'));
  assert.ok(enter('b'));
  assert.ok(enter('c'));
  assert.ok(enter('d'));
  assert.equal(enter('e'), undefined, 'the line of two is full');
  assert.deepEqual(began, ['a', 'b']);
  assert.equal(slots.waiting, 2);
  releases.get('a')!();
  releases.get('a')!();
  assert.deepEqual(began, ['a', 'b', 'c'], 'a release frees one slot, once');
  assert.equal(slots.active, 2);
  releases.get('b')!();
  releases.get('c')!();
  releases.get('d')!();
  assert.equal(slots.active, 0);
});

test('a waiting call that leaves the line never starts and frees its place', () => {
  const slots = new CallSlots(1, 1);
  let release!: () => void;
  slots.enter((r) => (release = r));
  let started = false;
  const leave = slots.enter(() => (started = true));
  assert.ok(leave);
  leave();
  assert.equal(slots.waiting, 0);
  assert.ok(
    slots.enter(() => undefined),
    'its place is free again',
  );
  release();
  assert.equal(started, false);
});
