import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import {
  FsUnwatchCommand,
  FsWatchCommand,
  FsWatchEvent,
  FsWriteCommand,
  type FsRefusal,
  type FsWatchEventPayload,
} from '../../../protocol/src/fs';
import { PORTABLE_STATE_DIR } from '../../../protocol/src/suspend';
import { WATCH_MAX_PENDING } from '../../../runner/src/tools/fs/watch';
import { commandsRun, until } from '../process/harness';

async function watching(recursive = true, dir = '.') {
  const r = await commandsRun();
  const reply = await r.command(FsWatchCommand.type, { path: dir, recursive });
  assert.ok(reply.ok, JSON.stringify(reply));
  const batches = () =>
    r.events
      .filter((e) => e.kind === FsWatchEvent.type.kind)
      .map((e) => e.payload as FsWatchEventPayload)
      .filter((p) => p.watchId === reply.watchId);
  const changes = () => batches().flatMap((b) => b.changes.map((c) => `${c.type} ${c.name}`));
  return { ...r, watchId: reply.watchId, batches, changes };
}

function sh(cwd: string, script: string): Promise<unknown> {
  const child = spawn('sh', ['-c', script], { cwd, stdio: 'ignore' });
  return once(child, 'exit');
}

test('a watch sees what another process does: create, write, remove, in subdirectories made meanwhile', async (t) => {
  const r = await watching();
  t.after(() => r.run.stop());
  mkdirSync(path.join(r.workspace, 'old'));
  await until(() => r.changes().includes('create old'));
  await sh(r.workspace, 'echo x > a; mkdir -p d/e && echo y > d/e/f; echo more >> a; rm a; echo z > old/g');
  await until(() =>
    ['create a', 'create d', 'create d/e', 'create d/e/f', 'remove a', 'create old/g'].every((c) =>
      r.changes().includes(c),
    ),
  );
  const all = r.changes();
  assert.ok(all.indexOf('create a') < all.indexOf('remove a'));
  // Changes of one batch are folded: a creation and its writes are one `create`.
  assert.ok(r.batches().every((b) => b.changes.length > 0 || b.dropped));
  rmSync(path.join(r.workspace, 'd'), { recursive: true });
  await until(() => r.changes().includes('remove d'));
  // The family's own atomic write shows as the file, never as its temp file.
  assert.ok((await r.command(FsWriteCommand.type, { path: 'via-fs.txt', data: 'eA==' })).ok);
  await until(() => r.changes().includes('create via-fs.txt'));
  assert.ok(!r.changes().some((c) => c.includes('.tether-')), r.changes().join());
});

test('a non-recursive watch reports its directory only; the reserved directory is never reported', async (t) => {
  const r = await watching(false);
  t.after(() => r.run.stop());
  mkdirSync(path.join(r.workspace, PORTABLE_STATE_DIR));
  mkdirSync(path.join(r.workspace, 'sub'));
  await until(() => r.changes().includes('create sub'));
  writeFileSync(path.join(r.workspace, PORTABLE_STATE_DIR, 'state'), 'x');
  writeFileSync(path.join(r.workspace, 'sub', 'deeper'), 'x');
  writeFileSync(path.join(r.workspace, 'top'), 'x');
  await until(() => r.changes().includes('create top'));
  await new Promise((res) => setTimeout(res, 100));
  assert.ok(!r.changes().some((c) => c.includes(PORTABLE_STATE_DIR) || c.includes('deeper')), r.changes().join());
});

test('a watch ends when its directory is removed; unwatch, limits and refusals', async (t) => {
  const r = await commandsRun();
  t.after(() => r.run.stop());
  mkdirSync(path.join(r.workspace, 'gone/sub'), { recursive: true });
  const reply = await r.command(FsWatchCommand.type, { path: 'gone', recursive: true });
  assert.ok(reply.ok);
  rmSync(path.join(r.workspace, 'gone'), { recursive: true });
  await until(() =>
    r.events.some((e) => e.kind === FsWatchEvent.type.kind && (e.payload as FsWatchEventPayload).ended !== undefined),
  );
  const last = r.events.filter((e) => e.kind === FsWatchEvent.type.kind).pop()!.payload as FsWatchEventPayload;
  assert.equal(last.watchId, reply.watchId);
  assert.equal(last.ended, 'the watched directory was removed');
  const after = await r.command(FsUnwatchCommand.type, { watchId: reply.watchId });
  assert.equal((after as FsRefusal).code, 'not_found', 'an ended watch is gone');

  writeFileSync(path.join(r.workspace, 'file'), '');
  for (const [payload, code] of [
    [{ path: 'file', recursive: false }, 'not_dir'],
    [{ path: 'missing', recursive: false }, 'not_found'],
    [{ path: '../..', recursive: false }, 'invalid'],
    [{ path: PORTABLE_STATE_DIR, recursive: true }, 'invalid'],
  ] as const) {
    const refused = await r.command(FsWatchCommand.type, payload);
    assert.equal((refused as FsRefusal).code, code, JSON.stringify(payload));
  }
  const ids: string[] = [];
  for (let i = 0; i < 16; i++) {
    const w = await r.command(FsWatchCommand.type, { path: '.', recursive: false });
    assert.ok(w.ok);
    ids.push(w.watchId);
  }
  const over = await r.command(FsWatchCommand.type, { path: '.', recursive: false });
  assert.equal((over as FsRefusal).code, 'limit');
  assert.deepEqual(await r.command(FsUnwatchCommand.type, { watchId: ids[0] }), { ok: true });
  assert.ok((await r.command(FsWatchCommand.type, { path: '.', recursive: false })).ok);
});

test('the queue is bounded: 5,000 files made at once arrive or are counted as dropped', async (t) => {
  const r = await watching(true);
  t.after(() => r.run.stop());
  const n = 5000;
  await sh(r.workspace, `mkdir many && cd many && i=1; while [ $i -le ${n} ]; do : > f$i; i=$((i+1)); done`);
  await until(() => {
    const created = new Set(r.changes().filter((c) => c.startsWith('create many/')));
    const dropped = r.batches().reduce((s, b) => s + (b.dropped ?? 0), 0);
    return created.size + dropped >= n;
  }, 20_000);
  for (const b of r.batches()) assert.ok(b.changes.length <= WATCH_MAX_PENDING, `${b.changes.length} in one batch`);
  assert.ok(
    r.changes().every((c) => /^create many(\/f\d+)?$/.test(c)),
    'only what was made is reported',
  );
  // Still watching afterwards.
  writeFileSync(path.join(r.workspace, 'many', 'later'), '');
  await until(() => r.changes().includes('create many/later'));
});
