import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  truncateSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import * as path from 'node:path';
import type { RunFeatures } from '../../../protocol/src/run';
import {
  PORTABLE_STATE_DIR,
  RestoreCommand,
  SuspendCommand,
  type RestoreResult,
  type SuspendResult,
} from '../../../protocol/src/suspend';
import type { ToolResult } from '../../../protocol/src/tools';
import { ReportCommand, WatchersCommand } from '../../../protocol/src/workers';
import { PortableState } from '../../../runner/src/portable';
import { runnerFor, tempWorkspace } from '../../helpers/runner';

/** A run's portable state on disk, without kernels: staged edits, the roster, torn states, the reserved directory. */

const textOf = (r: ToolResult) => r.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');
type Runner = Awaited<ReturnType<typeof runnerFor>>;

const suspend = async (r: Runner) =>
  (await r.run.command({
    family: SuspendCommand.type.family,
    command: SuspendCommand.type.command,
    payload: {},
  })) as SuspendResult;
const restore = async (r: Runner, keep = false, forkOf?: string) =>
  (await r.run.command({
    family: RestoreCommand.type.family,
    command: RestoreCommand.type.command,
    payload: { keep, forkOf },
  })) as RestoreResult;

async function resumed(first: Runner, features: Partial<RunFeatures>) {
  await first.run.stop();
  return runnerFor(features, {}, first.workspace);
}

const stateDir = (ws: string) => path.join(ws, PORTABLE_STATE_DIR, 'state');
const SOURCE = 'function f() {\n  console.log(1);\n  console.log(2);\n}\n';

async function stagedEdit(): Promise<Runner> {
  const first = await runnerFor({ ast: true });
  writeFileSync(path.join(first.workspace, 'a.js'), SOURCE);
  const r = await first.call('ast_edit', {
    pattern: 'console.log($X)',
    rewrite: 'logger.info($X)',
    language: 'javascript',
  });
  assert.ok(!r.isError, textOf(r));
  assert.match(textOf(r), /edit_id "edit_1"/);
  return first;
}

test('a staged ast edit survives a pause: resolve after the resume writes the same change', async () => {
  const first = await stagedEdit();
  const suspended = await suspend(first);
  assert.equal(suspended.written, true);
  assert.deepEqual(suspended.families.find((f) => f.family === 'ast')?.counts, { 'staged edits pending': 1 });
  const second = await resumed(first, { ast: true });
  const restored = await restore(second);
  assert.equal(restored.outcome, 'restored', restored.problem);
  assert.match(restored.notice, /ast: 1 staged edits pending/);
  const ok = await second.call('resolve', { edit_id: 'edit_1', action: 'accept' });
  assert.ok(!ok.isError, textOf(ok));
  assert.equal(
    readFileSync(path.join(second.workspace, 'a.js'), 'utf8'),
    'function f() {\n  logger.info(1);\n  logger.info(2);\n}\n',
  );
  // The next edit does not reuse the id of one that came back.
  writeFileSync(path.join(second.workspace, 'b.js'), 'console.log(3);\n');
  const next = await second.call('ast_edit', { pattern: 'console.log($X)', rewrite: 'x($X)', language: 'javascript' });
  assert.match(textOf(next), /edit_id "edit_2"/);
  // Restored once: the state is gone, a second restore finds none.
  assert.equal((await restore(second)).outcome, 'none');
  await second.run.stop();
});

test("a fork restores its parent's state on a copy of the workspace; another run's state is refused", async () => {
  const parent = await stagedEdit();
  assert.equal((await suspend(parent)).written, true);
  const copy = tempWorkspace();
  cpSync(parent.workspace, copy, { recursive: true });
  const fork = await runnerFor({ ast: true }, {}, copy, 'run-fork');
  const foreign = await restore(fork, true);
  assert.equal(foreign.outcome, 'torn');
  assert.match(foreign.problem ?? '', /another run \(run-test\)/);
  const restored = await restore(fork, false, 'run-test');
  assert.equal(restored.outcome, 'restored', restored.problem);
  assert.match(restored.notice, /a fork of run run-test/);
  const ok = await fork.call('resolve', { edit_id: 'edit_1', action: 'accept' });
  assert.ok(!ok.isError, textOf(ok));
  assert.match(readFileSync(path.join(copy, 'a.js'), 'utf8'), /logger\.info\(1\)/);
  assert.equal(readFileSync(path.join(parent.workspace, 'a.js'), 'utf8'), SOURCE, "the parent's file is untouched");
  // The fork's own later pause comes back as a resume, not as a fork again.
  assert.equal((await suspend(fork)).written, true);
  const again = await restore(fork, false, 'run-test');
  assert.equal(again.outcome, 'restored', again.problem);
  assert.match(again.notice, /was paused/);
  await fork.run.stop();
  await parent.run.stop();
});

test('a staged edit restored after the file changed meanwhile is refused, as without a pause', async () => {
  const first = await stagedEdit();
  await suspend(first);
  const second = await resumed(first, { ast: true });
  writeFileSync(path.join(second.workspace, 'a.js'), `${SOURCE}// changed\n`);
  assert.equal((await restore(second)).outcome, 'restored');
  const r = await second.call('resolve', { edit_id: 'edit_1', action: 'accept' });
  assert.equal(r.isError, true, textOf(r));
  assert.match(readFileSync(path.join(second.workspace, 'a.js'), 'utf8'), /changed/);
  await second.run.stop();
});

for (const damage of [
  'manifest missing',
  'manifest truncated',
  'a state file truncated',
  'a state file removed',
] as const) {
  test(`a torn state (${damage}) is reported and nothing of it is restored`, async () => {
    const first = await stagedEdit();
    await suspend(first);
    const dir = stateDir(first.workspace);
    const generation = readdirSync(dir).find((e) => e.startsWith('g-'))!;
    const file = path.join(dir, generation, 'ast', 'staged-edits.json');
    if (damage === 'manifest missing') unlinkSync(path.join(dir, 'manifest.json'));
    if (damage === 'manifest truncated') truncateSync(path.join(dir, 'manifest.json'), 40);
    if (damage === 'a state file truncated') truncateSync(file, 10);
    if (damage === 'a state file removed') unlinkSync(file);
    const second = await resumed(first, { ast: true });
    const restored = await restore(second);
    if (damage === 'manifest missing') {
      assert.equal(restored.outcome, 'none');
      assert.match(restored.problem ?? '', /no manifest/);
    } else {
      assert.equal(restored.outcome, 'torn');
      assert.match(
        restored.problem ?? '',
        damage === 'manifest truncated'
          ? /truncated or not JSON/
          : damage === 'a state file removed'
            ? /missing/
            : /holds 10 bytes/,
      );
      assert.match(restored.notice, /incomplete .* none of it was restored/);
    }
    assert.deepEqual(restored.families, []);
    const r = await second.call('resolve', { edit_id: 'edit_1', action: 'accept' });
    assert.match(textOf(r), /unknown edit_id "edit_1"; no edits are pending/);
    assert.equal(readFileSync(path.join(second.workspace, 'a.js'), 'utf8'), SOURCE);
    await second.run.stop();
  });
}

test('a suspend interrupted before its manifest leaves no state; the next suspend replaces it whole', async () => {
  const first = await stagedEdit();
  await suspend(first);
  const dir = stateDir(first.workspace);
  // A second suspend replaces the first: one generation, one manifest.
  await suspend(first);
  assert.equal(readdirSync(dir).filter((e) => e.startsWith('g-')).length, 1);
  // A generation directory with no manifest naming it (a suspend cut short) is not a state.
  unlinkSync(path.join(dir, 'manifest.json'));
  const second = await resumed(first, { ast: true });
  assert.equal((await restore(second)).outcome, 'none');
  await second.run.stop();
});

test('workers: the roster comes back; one that was running is named and comes back killed', async () => {
  const first = await runnerFor({ vibe: true });
  const watchers = WatchersCommand.type;
  await first.run.command({ family: watchers.family, command: watchers.command, payload: { count: 1 } });
  const spawn = (label: string) => first.call('vibe_spawn', { brief: `do ${label}`, label });
  assert.ok(!(await spawn('one')).isError);
  assert.ok(!(await spawn('two')).isError);
  const report = ReportCommand.type;
  await first.run.command({
    family: report.family,
    command: report.command,
    payload: { workerId: 'w2', status: 'done', text: 'all done' },
  });
  const suspended = await suspend(first);
  assert.deepEqual(
    suspended.notKept.map((n) => n.what),
    ['worker w1 (one), running'],
  );
  const second = await resumed(first, { vibe: true });
  const restored = await restore(second);
  assert.equal(restored.outcome, 'restored');
  assert.match(restored.notice, /worker w1 \(one\), running: a paused run keeps no processes/);
  const list = textOf(await second.call('vibe_list', {}));
  assert.match(list, /w1/);
  assert.match(list, /stopped by a pause/);
  assert.match(list, /all done/);
  await second.run.stop();
});

test('the state directory is reserved: file tools neither show it nor read or write it', async () => {
  const r = await runnerFor({ ast: true });
  await suspend(r);
  assert.ok(existsSync(path.join(stateDir(r.workspace), 'manifest.json')));
  const listing = await r.call('read', { path: '.' });
  assert.doesNotMatch(textOf(listing), /\.tether-run/);
  for (const p of ['.tether-run/state/manifest.json', './.tether-run/x', 'sub/../.tether-run/state']) {
    const read = await r.call('read', { path: p });
    assert.equal(read.isError, true, p);
    assert.match(textOf(read), /reserved/);
  }
  const write = await r.call('write', { path: '.tether-run/state/manifest.json', content: '{}' });
  assert.equal(write.isError, true);
  assert.match(textOf(write), /reserved/);
  // A symlink into it is refused as well.
  mkdirSync(path.join(r.workspace, 'd'));
  const { symlinkSync } = await import('node:fs');
  symlinkSync(path.join(r.workspace, '.tether-run'), path.join(r.workspace, 'd', 'link'));
  assert.match(textOf(await r.call('read', { path: 'd/link/state/manifest.json' })), /reserved/);
  await r.run.stop();
});

test('families start their processes before the files are checked; a torn state is prepared, never restored', async () => {
  const ws = tempWorkspace();
  const dir = path.join(ws, 'state');
  const events: string[] = [];
  const state = () => {
    const s = new PortableState(dir, { runId: 'run-1', conversationId: 'c' }, 1 << 20);
    s.keep('eval', {
      suspend: async (own) => {
        writeFileSync(path.join(own, 'python.state'), 'x'.repeat(1000));
        return {
          counts: {},
          notKept: [],
          kernels: [{ language: 'python', variables: 1, modules: 0, bytes: 1000, serializer: 'pickle' }],
        };
      },
      prepare: (saved) => events.push(`prepare ${saved.kernels?.map((k) => k.language).join()}`),
      restore: async () => {
        events.push('restore');
        return { counts: {}, notKept: [] };
      },
    });
    return s;
  };
  await state().suspend();
  const restored = await state().restore({ keep: true });
  assert.equal(restored.outcome, 'restored');
  assert.deepEqual(events, ['prepare python', 'restore']);
  events.length = 0;
  const generation = readdirSync(dir).find((e) => e.startsWith('g-'))!;
  truncateSync(path.join(dir, generation, 'eval', 'python.state'), 10);
  const torn = await state().restore();
  assert.equal(torn.outcome, 'torn');
  assert.deepEqual(events, ['prepare python']);
});
