import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WorkerRoster, type Worker, type WorkerBackend } from '../../../runner/src/tools/vibe/roster';
import { ClientWorkerBackend } from '../../../runner/src/tools/vibe/clientBackend';
import type { WorkerEventPayload } from '../../../protocol/src/workers';
import { WorkerOutput } from '../../../runner/src/tools/vibe/workerOutput';

/** A backend that records what the roster asked of it. */
class RecordingBackend implements WorkerBackend {
  readonly kind = 'command' as const;
  calls: string[] = [];
  reason: string | undefined;
  unavailable() {
    return this.reason;
  }
  begin(w: Worker, message?: string) {
    this.calls.push(`begin ${w.id} r${w.round}${message ? ` +${message}` : ''}`);
  }
  async stop(w: Worker, why: string) {
    this.calls.push(`stop ${w.id} ${why}`);
  }
}

function roster(max = 2) {
  let t = 1000;
  const backend = new RecordingBackend();
  const r = new WorkerRoster(
    { maxLiveWorkers: max, maxWorkers: 4, maxBriefChars: 100 },
    () => backend,
    () => t,
  );
  return { r, backend, tick: (ms: number) => (t += ms) };
}
const never = new AbortController().signal;

test('spawn gives ids, starts a round, and refuses past the live limit with a clear reason', () => {
  const { r, backend } = roster(2);
  assert.equal(r.spawn({ brief: 'a', label: 'A', tier: 'fast' }).id, 'w1');
  assert.equal(r.spawn({ brief: 'b', label: 'B', tier: 'good' }).id, 'w2');
  assert.throws(
    () => r.spawn({ brief: 'c', label: 'C', tier: 'fast' }),
    /2 workers are running, the most this run allows at once is 2/,
  );
  assert.deepEqual(backend.calls, ['begin w1 r1', 'begin w2 r1']);
  r.settle('w1', 1, 'done', 'ok');
  assert.equal(r.spawn({ brief: 'c', label: 'C', tier: 'fast' }).id, 'w3');
  r.settle('w2', 1, 'done', 'ok');
  assert.equal(r.spawn({ brief: 'd', label: 'D', tier: 'fast' }).id, 'w4');
  r.settle('w3', 1, 'done', 'ok');
  assert.throws(() => r.spawn({ brief: 'e', label: 'E', tier: 'fast' }), /spawned 4 workers, the most it may/);
});

test('a backend that cannot start refuses the spawn and leaves no worker behind', () => {
  const { r, backend } = roster();
  backend.reason = 'nobody watches';
  assert.throws(() => r.spawn({ brief: 'a', label: 'A', tier: 'fast' }), /cannot start a fast worker: nobody watches/);
  assert.equal(r.list().length, 0);
});

test('send appends to the brief, supersedes a running round, and a late settle of that round is ignored', async () => {
  const { r, backend } = roster();
  r.spawn({ brief: 'do x', label: 'X', tier: 'fast' });
  await r.send('w1', 'also y');
  assert.deepEqual(backend.calls, ['begin w1 r1', 'stop w1 superseded', 'begin w1 r2 +also y']);
  const w = r.get('w1');
  assert.equal(w.brief, 'do x\n\nalso y');
  assert.equal(r.settle('w1', 1, 'failed', 'old round'), false);
  assert.equal(w.status, 'running');
  assert.equal(r.settle('w1', 2, 'done', 'new round'), true);
  assert.equal(w.lastResult, 'new round');
  await assert.rejects(r.send('w1', 'x'.repeat(100)), /brief would grow past 100/);
  await assert.rejects(r.send('w9', 'hi'), /no worker "w9" in this run \(workers: w1\)/);
});

test('wait returns when the worker settles, or says it still runs when the time is up', async () => {
  const { r, tick } = roster();
  r.spawn({ brief: 'a', label: 'A', tier: 'fast' });
  const early = await r.wait('w1', 20, never);
  assert.equal(early.settled, false);
  const waiting = r.wait('w1', 5000, never);
  tick(2500);
  r.settle('w1', 1, 'done', 'finished');
  const late = await waiting;
  assert.equal(late.settled, true);
  assert.equal(r.view(late.worker).elapsed_seconds, 2.5);
  assert.equal((await r.wait('w1', 1, never)).settled, true);
});

test('kill settles at once, stops the backend, and a second kill is a no-op; stopAll kills the rest', async () => {
  const { r, backend } = roster(3);
  r.spawn({ brief: 'a', label: 'A', tier: 'fast' });
  r.spawn({ brief: 'b', label: 'B', tier: 'fast' });
  const waiting = r.wait('w1', 5000, never);
  assert.equal((await r.kill('w1')).wasRunning, true);
  assert.equal((await waiting).worker.status, 'killed');
  assert.equal((await r.kill('w1')).wasRunning, false);
  await r.stopAll();
  assert.equal(r.get('w2').status, 'killed');
  assert.deepEqual(
    backend.calls.filter((c) => c.startsWith('stop')),
    ['stop w1 kill', 'stop w2 kill'],
  );
  assert.throws(() => r.spawn({ brief: 'c', label: 'C', tier: 'fast' }), /run is stopping/);
});

test('the client backend numbers its events, and a snapshot holds only running client workers', () => {
  const events: WorkerEventPayload[] = [];
  const client = new ClientWorkerBackend((e) => events.push(e));
  const r = new WorkerRoster({ maxLiveWorkers: 4, maxWorkers: 10, maxBriefChars: 1000 }, () => client);
  assert.throws(() => r.spawn({ brief: 'a', label: 'A', tier: 'good' }), /nothing is connected to WatchWorkers/);
  client.setWatchers(1);
  r.spawn({ brief: 'a', label: 'A', tier: 'good' });
  r.spawn({ brief: 'b', label: 'B', tier: 'fast' });
  r.settle('w2', 1, 'done', 'ok');
  assert.deepEqual(
    events.map((e) => [e.seq, e.kind, e.workerId]),
    [
      [1, 'START', 'w1'],
      [2, 'START', 'w2'],
    ],
  );
  const snap = client.snapshot(r.list());
  assert.equal(snap.seq, 2);
  assert.deepEqual(
    snap.events.map((e) => [e.kind, e.workerId, e.brief, e.tier]),
    [['START', 'w1', 'a', 'good']],
  );
});

test('the output tail keeps the end and says how much was left out', () => {
  const t = new WorkerOutput(10);
  t.push(Buffer.from('0123456789'));
  t.push(Buffer.from('abcdef\nlast line\n'));
  assert.equal(t.text(), '[the first 17 bytes of output were left out]\nlast line\n');
  assert.equal(t.lastLine(), 'last line');
});
