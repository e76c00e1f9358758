import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import type { ToolResult } from '../../../protocol/src/tools';
import { runnerFor } from '../../helpers/runner';
import { SCRIPTED_WORKER } from './scriptedWorker';

const settings = {
  vibe: {
    maxLiveWorkers: 2,
    outputLimitBytes: 1024,
    killGraceMs: 500,
    tiers: {
      fast: { backend: 'command', command: ['sh', '-c', SCRIPTED_WORKER] },
      good: { backend: 'command', command: ['sh', '-c', 'sleep 30'], timeoutSeconds: 0.5 },
    },
  },
};

const text = (r: ToolResult) => r.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');
const structured = (r: ToolResult) => r.structured as Record<string, any>;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  // A zombie still answers kill(0); it is dead for our purpose.
  try {
    return !readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('Z');
  } catch {
    return false;
  }
}

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 25));
  }
}

test('the vibe tools exist only in vibe mode, all read tier', async () => {
  assert.ok(!(await runnerFor()).registry.has('vibe_spawn'));
  const { registry } = await runnerFor({ vibe: true }, settings);
  const vibe = registry.list().filter((t) => t.name.startsWith('vibe_'));
  assert.deepEqual(vibe.map((t) => t.name).sort(), ['vibe_kill', 'vibe_list', 'vibe_send', 'vibe_spawn', 'vibe_wait']);
  assert.ok(vibe.every((t) => t.tier === 'read'));
});

test('a bad runner.vibe config fails the run start with the reason', async () => {
  await assert.rejects(
    runnerFor({ vibe: true }, { vibe: { tiers: { fast: { backend: 'command' } } } }),
    /invalid server config runner.vibe/,
  );
  await assert.rejects(runnerFor({ vibe: true }, { vibe: { maxLiveWorkers: 0 } }), /maxLiveWorkers|must be >= 1/);
});

test('a command worker edits the workspace: spawn returns at once, wait gets the result, send runs it again on the longer brief', async () => {
  const { call, workspace, run } = await runnerFor({ vibe: true }, settings);
  const spawned = await call('vibe_spawn', { brief: 'add: one', label: 'notes' });
  assert.ok(!spawned.isError, text(spawned));
  assert.equal(structured(spawned).id, 'w1');
  assert.equal(structured(spawned).status, 'running');
  const done = await call('vibe_wait', { worker_id: 'w1', timeout_seconds: 10 });
  assert.equal(structured(done).status, 'done', text(done));
  assert.match(text(done), /w1 round 1 wrote 1 lines/);
  assert.equal(readFileSync(path.join(workspace, 'notes.txt'), 'utf8'), 'one\n');

  const sent = await call('vibe_send', { worker_id: 'w1', message: 'add: two' });
  assert.match(text(sent), /round 2/);
  const again = await call('vibe_wait', { worker_id: 'w1' });
  assert.equal(structured(again).status, 'done');
  assert.equal(structured(again).brief, 'add: one\n\nadd: two');
  assert.equal(readFileSync(path.join(workspace, 'notes.txt'), 'utf8'), 'one\ntwo\n');

  const list = await call('vibe_list', {});
  assert.match(
    text(list),
    /0 running, 1 in all:\nw1 "notes" \(fast\) done, [0-9.]+s, round 2 — w1 round 2 wrote 2 lines/,
  );
  await run.stop();
});

test('a failing worker is failed with its exit code and output; an unknown id is a clear error', async () => {
  const { call, run } = await runnerFor({ vibe: true }, settings);
  await call('vibe_spawn', { brief: 'FAIL please', label: 'doomed', tier: 'fast' });
  const r = await call('vibe_wait', { worker_id: 'w1', timeout_seconds: 10 });
  assert.equal(structured(r).status, 'failed');
  assert.match(structured(r).last_result, /exited with code 3\ncannot do it: w1/);
  const unknown = await call('vibe_wait', { worker_id: 'w7' });
  assert.equal(unknown.isError, true);
  assert.match(text(unknown), /no worker "w7"/);
  await run.stop();
});

test('kill stops the whole process tree; the live limit refuses a third worker; workers die with the run', async () => {
  const { call, workspace, run } = await runnerFor({ vibe: true }, settings);
  await call('vibe_spawn', { brief: 'SLOW', label: 'sleeper' });
  await until(() => existsSync(path.join(workspace, 'sleeper.pid')));
  const sleeper = Number(readFileSync(path.join(workspace, 'sleeper.pid'), 'utf8'));
  assert.ok(alive(sleeper));

  const waited = await call('vibe_wait', { worker_id: 'w1', timeout_seconds: 0.2 });
  assert.ok(!waited.isError);
  assert.match(text(waited), /still running \(waited 0\.2s\)/);

  await call('vibe_spawn', { brief: 'SLOW again', label: 'second' });
  const third = await call('vibe_spawn', { brief: 'add: x', label: 'third' });
  assert.equal(third.isError, true);
  assert.match(text(third), /2 workers are running, the most this run allows at once is 2/);

  const killed = await call('vibe_kill', { worker_id: 'w1' });
  assert.match(text(killed), /killed w1/);
  await until(() => !alive(sleeper));
  assert.equal(structured(await call('vibe_wait', { worker_id: 'w1' })).status, 'killed');
  assert.match(text(await call('vibe_kill', { worker_id: 'w1' })), /already settled \(killed\)/);

  const pidNow = () => Number(readFileSync(path.join(workspace, 'sleeper.pid'), 'utf8'));
  await until(() => pidNow() !== sleeper);
  const second = pidNow();
  assert.ok(alive(second));
  await run.stop();
  await until(() => !alive(second));
});

test('a worker past its time limit is failed and stopped; a missing command fails clearly; output is capped', async () => {
  const capped = {
    vibe: {
      outputLimitBytes: 1024,
      tiers: {
        fast: { backend: 'command', command: ['sh', '-c', "head -c 5000 /dev/zero | tr '\\0' x; echo; echo the end"] },
        good: { backend: 'command', command: ['/nonexistent/worker'] },
      },
    },
  };
  const { call, run } = await runnerFor({ vibe: true }, capped);
  await call('vibe_spawn', { brief: 'talk a lot', label: 'chatty' });
  const r = structured(await call('vibe_wait', { worker_id: 'w1', timeout_seconds: 10 }));
  assert.equal(r.status, 'done');
  assert.match(r.last_result, /^\[the first 3985 bytes of output were left out\]\nx+\nthe end$/);
  await call('vibe_spawn', { brief: 'x', label: 'missing', tier: 'good' });
  const missing = structured(await call('vibe_wait', { worker_id: 'w2', timeout_seconds: 10 }));
  assert.equal(missing.status, 'failed');
  assert.match(
    missing.last_result,
    /could not start the worker command "\/nonexistent\/worker": spawn \/nonexistent\/worker ENOENT/,
  );
  await run.stop();

  const slow = await runnerFor({ vibe: true }, settings);
  await slow.call('vibe_spawn', { brief: 'think', label: 'slow', tier: 'good' });
  const t = structured(await slow.call('vibe_wait', { worker_id: 'w1', timeout_seconds: 10 }));
  assert.equal(t.status, 'failed');
  assert.match(t.last_result, /ran longer than 0.5s and was stopped/);
  await slow.run.stop();
});
