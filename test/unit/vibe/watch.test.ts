import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { RunnerClient } from '../../../gateway/src/runs/RunnerClient';
import { WorkerWatch } from '../../../gateway/src/workers/WorkerWatch';
import {
  WatchersCommand,
  WorkerEvent,
  type WatchersPayload,
  type WatchSnapshot,
  type WorkerEventPayload,
} from '../../../protocol/src/workers';
import type { FamilyCommand, RunEventType } from '../../../protocol/src/run';

const ev = (seq: number, kind: WorkerEventPayload['kind'], workerId: string): WorkerEventPayload => ({
  seq,
  kind,
  workerId,
  label: workerId,
  tier: 'good',
  brief: 'b',
});

/** A runner stand-in: worker events go to listeners; `watchers` answers with a snapshot. */
function fakeRunner(onWatch: (count: number, emit: (e: WorkerEventPayload) => void) => WatchSnapshot) {
  const listeners: ((e: WorkerEventPayload) => void)[] = [];
  const counts: number[] = [];
  const emit = (e: WorkerEventPayload) => listeners.forEach((l) => l(e));
  const runner = {
    onRunEvent: (type: RunEventType<unknown>, l: (e: WorkerEventPayload) => void) => {
      assert.equal(type, WorkerEvent.type);
      listeners.push(l);
    },
    command: async (type: FamilyCommand<unknown, unknown>, payload: WatchersPayload) => {
      assert.equal(type, WatchersCommand.type);
      counts.push(payload.count);
      return onWatch(payload.count, emit);
    },
  } as unknown as RunnerClient;
  return { runner, emit, counts };
}

test('a new watcher gets the snapshot, then only the events the snapshot does not hold, in order', async () => {
  const { runner, emit, counts } = fakeRunner((_count, emitNow) => {
    // Two events race with the snapshot: seq 5 is in it, seq 6 is not.
    emitNow(ev(5, 'START', 'w5'));
    emitNow(ev(6, 'SEND', 'w1'));
    return { seq: 5, events: [ev(5, 'START', 'w1'), ev(5, 'START', 'w5')] };
  });
  const got: string[] = [];
  const unsubscribe = await new WorkerWatch().of(runner).add((e) => got.push(`${e.seq}:${e.kind}:${e.workerId}`));
  emit(ev(7, 'KILL', 'w5'));
  assert.deepEqual(got, ['5:START:w1', '5:START:w5', '6:SEND:w1', '7:KILL:w5']);
  assert.deepEqual(counts, [1]);
  unsubscribe();
  emit(ev(8, 'START', 'w9'));
  assert.equal(got.length, 4);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(counts, [1, 0], 'the runner is told nobody watches any more');
});

test('two watchers of one runner both get every event; a failing snapshot leaves no watcher behind', async () => {
  let fail = false;
  const { runner, emit } = fakeRunner(() => {
    if (fail) throw new Error('runner gone');
    return { seq: 0, events: [] };
  });
  const watch = new WorkerWatch();
  const a: number[] = [];
  const b: number[] = [];
  await watch.of(runner).add((e) => a.push(e.seq));
  await watch.of(runner).add((e) => b.push(e.seq));
  fail = true;
  const c: number[] = [];
  await assert.rejects(
    watch.of(runner).add((e) => c.push(e.seq)),
    /runner gone/,
  );
  emit(ev(1, 'START', 'w1'));
  assert.deepEqual([a, b, c], [[1], [1], []]);
});
