import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { status, type ClientReadableStream, type ServiceError } from '@grpc/grpc-js';
import { WorkerEventKind, WorkerStatus, type WorkerEvent } from '@tether/contract';
import { resultText, type TetherClient } from '../../../clients/typescript/src';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { SCRIPTED_WORKER } from '../../unit/vibe/scriptedWorker';

// fast workers are a scripted command inside the run's sandbox; good workers are run by "the
// platform", which this test plays through WatchWorkers and ReportWorker.
let t: TestGateway;
let runId: string;

before(async () => {
  t = await startTestGateway({
    runner: {
      vibe: {
        maxLiveWorkers: 3,
        killGraceMs: 500,
        tiers: { fast: { backend: 'command', command: ['sh', '-c', SCRIPTED_WORKER] }, good: { backend: 'client' } },
      },
    },
  });
  const run = await t.alice.createRun({ features: { vibe: true } });
  assert.equal(run.error, '');
  runId = run.runId;
});
after(async () => {
  await t?.close();
});

async function tool(name: string, args: Record<string, unknown>) {
  const r = await t.alice.callTool(runId, name, args);
  return {
    text: resultText(r.result),
    isError: !!r.result.isError,
    data: r.result.structuredJson ? JSON.parse(r.result.structuredJson) : undefined,
  };
}

/** A platform's view of one WatchWorkers stream: events in order, awaited one by one. */
class Watcher {
  private readonly queue: WorkerEvent[] = [];
  private wake?: () => void;
  readonly ended: Promise<void>;
  readonly stream: ClientReadableStream<WorkerEvent>;

  constructor(client: TetherClient, run: string) {
    this.stream = client.watchWorkers(run);
    this.stream.on('data', (e: WorkerEvent) => {
      this.queue.push(e);
      this.wake?.();
    });
    this.ended = new Promise((resolve, reject) => {
      this.stream.on('end', () => resolve());
      this.stream.on('error', reject);
    });
    this.ended.catch(() => undefined);
  }

  /** Resolves once the gateway has the watch live (its response headers arrived). */
  live(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.stream.once('metadata', () => resolve());
      this.ended.catch(reject);
    });
  }

  async next(ms = 10_000): Promise<WorkerEvent> {
    const end = Date.now() + ms;
    while (this.queue.length === 0) {
      if (Date.now() > end) throw new Error('no worker event in time');
      await new Promise<void>((r) => {
        this.wake = r;
        setTimeout(r, 50);
      });
    }
    return this.queue.shift()!;
  }

  get pending(): number {
    return this.queue.length;
  }
}

test('a command worker edits the workspace inside the run: spawn, list, wait, send', async () => {
  const spawned = await tool('vibe_spawn', { brief: 'add: alpha', label: 'notes', tier: 'fast' });
  assert.ok(!spawned.isError, spawned.text);
  const id = spawned.data.id;
  const listed = await tool('vibe_list', {});
  assert.match(listed.text, new RegExp(`${id} "notes" \\(fast\\)`));
  const done = await tool('vibe_wait', { worker_id: id, timeout_seconds: 30 });
  assert.equal(done.data.status, 'done', done.text);
  assert.equal((await tool('read', { path: 'notes.txt' })).text.includes('alpha'), true);

  await tool('vibe_send', { worker_id: id, message: 'add: beta' });
  const again = await tool('vibe_wait', { worker_id: id, timeout_seconds: 30 });
  assert.match(again.text, /round 2 wrote 2 lines/);
  const notes = (await tool('read', { path: 'notes.txt' })).text;
  assert.match(notes, /alpha[\s\S]*beta/);
});

test('a command worker that fails, and one killed with its whole process tree', async () => {
  const failing = await tool('vibe_spawn', { brief: 'FAIL now', label: 'doomed' });
  const failed = await tool('vibe_wait', { worker_id: failing.data.id, timeout_seconds: 30 });
  assert.equal(failed.data.status, 'failed');
  assert.match(failed.data.last_result, /exited with code 3/);

  const slow = await tool('vibe_spawn', { brief: 'SLOW', label: 'sleeper' });
  for (let i = 0; i < 100 && (await tool('read', { path: 'sleeper.pid' })).isError; i++)
    await new Promise((r) => setTimeout(r, 50));
  const check = async () => {
    const c = await tool('vibe_spawn', { brief: 'CHECK', label: 'check' });
    return (await tool('vibe_wait', { worker_id: c.data.id, timeout_seconds: 30 })).data.last_result;
  };
  assert.equal(await check(), 'alive');
  assert.match((await tool('vibe_wait', { worker_id: slow.data.id, timeout_seconds: 0.2 })).text, /still running/);
  // A client that cancels a long wait is answered at once; the worker keeps running.
  const cancel = new AbortController();
  setTimeout(() => cancel.abort('enough'), 200);
  const cancelled = await t.alice.callTool(
    runId,
    'vibe_wait',
    { worker_id: slow.data.id, timeout_seconds: 600 },
    { signal: cancel.signal },
  );
  assert.equal(cancelled.result.isError, true);
  assert.match(resultText(cancelled.result), /cancelled/);
  assert.equal(await check(), 'alive');
  assert.match((await tool('vibe_kill', { worker_id: slow.data.id })).text, /killed/);
  assert.equal(await check(), 'gone');
  assert.equal((await tool('vibe_wait', { worker_id: slow.data.id })).data.status, 'killed');
});

test('a client worker: START, progress, SEND, result by ReportWorker; KILL; a reconnecting watcher gets a snapshot', async () => {
  const refused = await tool('vibe_spawn', { brief: 'design it', label: 'designer', tier: 'good' });
  assert.equal(refused.isError, true);
  assert.match(refused.text, /nothing is connected to WatchWorkers/);

  const platform = new Watcher(t.alice, runId);
  await platform.live();
  const spawned = await tool('vibe_spawn', { brief: 'design the cache', label: 'designer', tier: 'good' });
  const id = spawned.data.id;
  const start = await platform.next();
  assert.deepEqual(
    [start.kind, start.workerId, start.label, start.tier, start.brief],
    [WorkerEventKind.START, id, 'designer', 'good', 'design the cache'],
  );

  await t.alice.reportWorker({ runId, workerId: id, status: WorkerStatus.RUNNING, text: 'sketching options' });
  assert.match(
    (await tool('vibe_list', {})).text,
    new RegExp(`${id} "designer" \\(good\\) running, .* — sketching options`),
  );
  assert.match(
    (await tool('vibe_wait', { worker_id: id, timeout_seconds: 0.1 })).text,
    /still running.*Latest progress: sketching options/,
  );

  await tool('vibe_send', { worker_id: id, message: 'keep it under 100 lines' });
  const send = await platform.next();
  assert.deepEqual(
    [send.kind, send.workerId, send.message, send.brief],
    [WorkerEventKind.SEND, id, 'keep it under 100 lines', 'design the cache\n\nkeep it under 100 lines'],
  );

  const waiting = tool('vibe_wait', { worker_id: id, timeout_seconds: 30 });
  await t.alice.reportWorker({ runId, workerId: id, status: WorkerStatus.DONE, text: 'an LRU with a 5 minute TTL' });
  const done = await waiting;
  assert.equal(done.data.status, 'done');
  assert.equal(done.data.last_result, 'an LRU with a 5 minute TTL');

  const late = (await t.alice
    .reportWorker({ runId, workerId: id, status: WorkerStatus.DONE, text: 'again' })
    .catch((e) => e)) as ServiceError;
  assert.equal(late.code, status.FAILED_PRECONDITION);
  assert.match(late.details, /already settled/);

  // A second watcher connecting now is told about the client worker still running.
  const second = await tool('vibe_spawn', { brief: 'review w1', label: 'reviewer', tier: 'good' });
  assert.equal((await platform.next()).workerId, second.data.id);
  const reconnect = new Watcher(t.alice, runId);
  await reconnect.live();
  const snap = await reconnect.next();
  assert.deepEqual([snap.kind, snap.workerId, snap.brief], [WorkerEventKind.START, second.data.id, 'review w1']);

  await tool('vibe_kill', { worker_id: second.data.id });
  for (const w of [platform, reconnect]) assert.deepEqual([(await w.next()).kind], [WorkerEventKind.KILL]);
  assert.equal((await tool('vibe_wait', { worker_id: second.data.id })).data.status, 'killed');
  platform.stream.cancel();
  reconnect.stream.cancel();
});

test('ReportWorker and WatchWorkers refuse what is not theirs: other tenants, command workers, bad input, runs without vibe', async () => {
  const codeOf = (p: Promise<unknown>) =>
    p.then(
      () => status.OK,
      (e: ServiceError) => e.code,
    );
  assert.equal(
    await codeOf(t.bob.reportWorker({ runId, workerId: 'w1', status: WorkerStatus.DONE, text: '' })),
    status.NOT_FOUND,
  );
  const bobWatch = new Watcher(t.bob, runId);
  await assert.rejects(bobWatch.ended, (e: ServiceError) => e.code === status.NOT_FOUND);
  assert.equal(
    await codeOf(t.alice.reportWorker({ runId, workerId: 'w1', status: WorkerStatus.DONE, text: '' })),
    status.FAILED_PRECONDITION,
  );
  assert.equal(
    await codeOf(t.alice.reportWorker({ runId, workerId: 'w99', status: WorkerStatus.DONE, text: '' })),
    status.NOT_FOUND,
  );
  assert.equal(
    await codeOf(t.alice.reportWorker({ runId, workerId: 'w1', status: WorkerStatus.UNSPECIFIED, text: '' })),
    status.INVALID_ARGUMENT,
  );

  const plain = await t.alice.createRun({});
  const plainWatch = new Watcher(t.alice, plain.runId);
  await assert.rejects(
    plainWatch.ended,
    (e: ServiceError) => e.code === status.FAILED_PRECONDITION && /without vibe mode/.test(e.details),
  );
  assert.ok(!(await t.alice.listTools(plain.runId)).some((x) => x.name.startsWith('vibe_')));
  await t.alice.deleteRun(plain.runId);
});

test('the live limit refuses a worker past it, and the watch ends with the run', async () => {
  const platform = new Watcher(t.alice, runId);
  await platform.live();
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) ids.push((await tool('vibe_spawn', { brief: `SLOW ${i}`, label: `s${i}` })).data.id);
  const over = await tool('vibe_spawn', { brief: 'one too many', label: 'extra', tier: 'good' });
  assert.equal(over.isError, true);
  assert.match(over.text, /3 workers are running, the most this run allows at once is 3/);
  await t.alice.deleteRun(runId);
  await platform.ended;
});
