import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  FS_LIST_MAX_ENTRIES,
  FsListCommand,
  FsMakeDirCommand,
  FsMoveCommand,
  FsReadCommand,
  FsRemoveCommand,
  FsStatCommand,
  FsWriteCommand,
  type FsRefusal,
} from '../../../protocol/src/fs';
import { PORTABLE_STATE_DIR } from '../../../protocol/src/suspend';
import { listTree } from '../../../runner/src/tools/fs/list';
import { Owners } from '../../../runner/src/tools/fs/owners';
import { FsPaths } from '../../../runner/src/tools/fs/paths';
import { Workspace } from '../../../runner/src/workspace';
import { commandsRun } from '../process/harness';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const code = (reply: { ok: boolean }) => (reply as FsRefusal).code;

test('the family exists only with features.commands', async () => {
  const r = await commandsRun({}, false);
  await assert.rejects(r.command(FsStatCommand.type, { path: '.' }), /no command handler for fs/);
});

test('stat: an absolute path inside the sandbox, type, size, mode, owner and group by name', async () => {
  const r = await commandsRun();
  writeFileSync(path.join(r.workspace, 'a.txt'), 'hello');
  chmodSync(path.join(r.workspace, 'a.txt'), 0o640);
  symlinkSync('a.txt', path.join(r.workspace, 'link'));
  const reply = await r.command(FsStatCommand.type, { path: 'a.txt' });
  assert.ok(reply.ok);
  const { entry } = reply;
  assert.equal(entry.name, 'a.txt');
  assert.equal(entry.path, path.join(r.workspace, 'a.txt'));
  assert.equal(entry.type, 'file');
  assert.equal(entry.size, 5);
  assert.equal(entry.mode & 0o777, 0o640);
  assert.equal(entry.owner, os.userInfo().username);
  assert.equal(typeof entry.group, 'string');
  assert.ok(Math.abs(entry.mtimeMs - Date.now()) < 60_000);
  const link = await r.command(FsStatCommand.type, { path: path.join(r.workspace, 'link') });
  assert.ok(link.ok);
  assert.equal(link.entry.type, 'symlink');
  assert.equal(link.entry.symlinkTarget, 'a.txt');
  const root = await r.command(FsStatCommand.type, { path: '.' });
  assert.ok(root.ok);
  assert.equal(root.entry.path, r.workspace);
  assert.equal(root.entry.type, 'dir');
  assert.equal(code(await r.command(FsStatCommand.type, { path: 'missing' })), 'not_found');
});

test('list: depth, no reserved directory, symlinks listed and not followed', async () => {
  const r = await commandsRun();
  mkdirSync(path.join(r.workspace, 'd/e/f'), { recursive: true });
  mkdirSync(path.join(r.workspace, PORTABLE_STATE_DIR, 'state'), { recursive: true });
  writeFileSync(path.join(r.workspace, 'd/x'), 'x');
  writeFileSync(path.join(r.workspace, 'd/e/y'), 'y');
  symlinkSync('/etc', path.join(r.workspace, 'etc'));
  const one = await r.command(FsListCommand.type, { path: '.', depth: 1 });
  assert.ok(one.ok);
  assert.deepEqual(
    one.entries.map((e) => [e.name, e.type]),
    [
      ['d', 'dir'],
      ['etc', 'symlink'],
    ],
  );
  assert.equal(one.truncated, undefined);
  const two = await r.command(FsListCommand.type, { path: '.', depth: 3 });
  assert.ok(two.ok);
  assert.deepEqual(
    two.entries.map((e) => path.relative(r.workspace, e.path)).sort(),
    ['d', 'd/e', 'd/e/f', 'd/e/y', 'd/x', 'etc'].sort(),
  );
  assert.equal(code(await r.command(FsListCommand.type, { path: 'd/x', depth: 1 })), 'not_dir');
  assert.equal(code(await r.command(FsListCommand.type, { path: 'd', depth: 0 })), 'invalid');
  assert.equal(code(await r.command(FsListCommand.type, { path: 'etc', depth: 1 })), 'invalid');
  assert.equal(code(await r.command(FsListCommand.type, { path: PORTABLE_STATE_DIR, depth: 1 })), 'invalid');
});

test('list stops at its cap and says it was truncated', async () => {
  const r = await commandsRun();
  for (let i = 0; i < 30; i++) writeFileSync(path.join(r.workspace, `f${String(i).padStart(2, '0')}`), '');
  const paths = new FsPaths(new Workspace(r.workspace));
  const capped = await listTree(r.workspace, 1, paths, new Owners(), 10);
  assert.equal(capped.entries.length, 10);
  assert.equal(capped.truncated, true);
  const exact = await listTree(r.workspace, 1, paths, new Owners(), 30);
  assert.equal(exact.entries.length, 30);
  assert.equal(exact.truncated, false);
  assert.equal(FS_LIST_MAX_ENTRIES, 10_000);
});

test('mkdir makes parents; created false for a directory there; exists for a file', async () => {
  const r = await commandsRun();
  const made = await r.command(FsMakeDirCommand.type, { path: 'a/b/c' });
  assert.ok(made.ok);
  assert.equal(made.created, true);
  assert.equal(made.entry.type, 'dir');
  assert.ok(statSync(path.join(r.workspace, 'a/b/c')).isDirectory());
  const again = await r.command(FsMakeDirCommand.type, { path: 'a/b/c' });
  assert.ok(again.ok && again.created === false);
  writeFileSync(path.join(r.workspace, 'file'), '');
  assert.equal(code(await r.command(FsMakeDirCommand.type, { path: 'file' })), 'exists');
  assert.equal(code(await r.command(FsMakeDirCommand.type, { path: 'file/sub' })), 'not_dir');
});

test('move renames and makes the target’s parents; remove is rm -rf but never the root', async () => {
  const r = await commandsRun();
  mkdirSync(path.join(r.workspace, 'src/inner'), { recursive: true });
  writeFileSync(path.join(r.workspace, 'src/inner/f'), 'f');
  const moved = await r.command(FsMoveCommand.type, { from: 'src', to: 'deep/er/dst' });
  assert.ok(moved.ok);
  assert.equal(moved.entry.path, path.join(r.workspace, 'deep/er/dst'));
  assert.equal(readFileSync(path.join(r.workspace, 'deep/er/dst/inner/f'), 'utf8'), 'f');
  assert.equal(code(await r.command(FsMoveCommand.type, { from: 'src', to: 'x' })), 'not_found');
  assert.equal(code(await r.command(FsMoveCommand.type, { from: 'deep', to: 'deep/er/in' })), 'invalid');
  assert.equal(code(await r.command(FsMoveCommand.type, { from: '.', to: 'x' })), 'invalid');

  assert.deepEqual(await r.command(FsRemoveCommand.type, { path: 'deep' }), { ok: true });
  assert.deepEqual(readdirSync(r.workspace), []);
  assert.equal(code(await r.command(FsRemoveCommand.type, { path: 'deep' })), 'not_found');
  assert.equal(code(await r.command(FsRemoveCommand.type, { path: '.' })), 'invalid');
  assert.equal(code(await r.command(FsRemoveCommand.type, { path: r.workspace })), 'invalid');
  // A symlink is removed itself, never what it points to.
  mkdirSync(path.join(r.workspace, 'kept'));
  writeFileSync(path.join(r.workspace, 'kept/k'), 'k');
  symlinkSync('kept', path.join(r.workspace, 'alias'));
  assert.deepEqual(await r.command(FsRemoveCommand.type, { path: 'alias' }), { ok: true });
  assert.equal(readFileSync(path.join(r.workspace, 'kept/k'), 'utf8'), 'k');
});

test('read and write: whole files in base64, the limit, directories, parents made, 0644, no temp left', async () => {
  const r = await commandsRun();
  const written = await r.command(FsWriteCommand.type, { path: 'new/dir/f.bin', data: b64('\x00\x01binary') });
  assert.ok(written.ok);
  assert.equal(written.entry.size, 8);
  assert.equal(written.entry.mode & 0o777, 0o644 & ~process.umask());
  assert.deepEqual(readdirSync(path.join(r.workspace, 'new/dir')), ['f.bin']);
  const read = await r.command(FsReadCommand.type, { path: 'new/dir/f.bin', maxBytes: 100 });
  assert.ok(read.ok);
  assert.equal(Buffer.from(read.data, 'base64').toString('latin1'), '\x00\x01binary');
  assert.equal(read.size, 8);
  const over = await r.command(FsReadCommand.type, { path: 'new/dir/f.bin', maxBytes: 7 });
  assert.equal(code(over), 'too_large');
  assert.equal(code(await r.command(FsReadCommand.type, { path: 'new', maxBytes: 100 })), 'is_dir');
  assert.equal(code(await r.command(FsReadCommand.type, { path: 'none', maxBytes: 100 })), 'not_found');
  assert.equal(code(await r.command(FsWriteCommand.type, { path: 'new', data: b64('x') })), 'is_dir');
  assert.equal(code(await r.command(FsWriteCommand.type, { path: 'new/dir/f.bin/x', data: b64('x') })), 'not_dir');
  assert.equal(code(await r.command(FsWriteCommand.type, { path: 'x', data: 'not base64!' })), 'invalid');
  const again = await r.command(FsWriteCommand.type, { path: 'new/dir/f.bin', data: b64('replaced') });
  assert.ok(again.ok);
  assert.equal(readFileSync(path.join(r.workspace, 'new/dir/f.bin'), 'utf8'), 'replaced');
});

test('paths are confined: .., absolute outside, symlinks out, the reserved directory', async () => {
  const r = await commandsRun();
  symlinkSync('/etc', path.join(r.workspace, 'etc'));
  mkdirSync(path.join(r.workspace, PORTABLE_STATE_DIR));
  const outside = path.join(path.dirname(r.workspace), 'tether-outside-x');
  const attempts: [string, unknown][] = [
    [FsReadCommand.type.command, { path: '../x', maxBytes: 10 }],
    [FsReadCommand.type.command, { path: '/etc/passwd', maxBytes: 10_000 }],
    [FsReadCommand.type.command, { path: 'etc/passwd', maxBytes: 10_000 }],
    [FsWriteCommand.type.command, { path: 'etc/tether-x', data: b64('x') }],
    [FsWriteCommand.type.command, { path: outside, data: b64('x') }],
    [FsListCommand.type.command, { path: 'etc', depth: 1 }],
    [FsMakeDirCommand.type.command, { path: 'etc/tether-d' }],
    [FsMoveCommand.type.command, { from: 'etc/passwd', to: 'stolen' }],
    [FsMoveCommand.type.command, { from: 'etc', to: '../moved' }],
    [FsRemoveCommand.type.command, { path: 'etc/hostname' }],
    [FsStatCommand.type.command, { path: 'etc/passwd' }],
    [FsStatCommand.type.command, { path: PORTABLE_STATE_DIR }],
    [FsWriteCommand.type.command, { path: `${PORTABLE_STATE_DIR}/x`, data: b64('x') }],
    [FsReadCommand.type.command, { path: 'a\0b', maxBytes: 1 }],
    [FsStatCommand.type.command, { path: '' }],
    [FsStatCommand.type.command, { path: 42 }],
    [FsStatCommand.type.command, null],
  ];
  for (const [command, payload] of attempts) {
    const reply = (await r.run.command({ family: 'fs', command, payload })) as FsRefusal;
    assert.equal(reply.ok, false, `${command} ${JSON.stringify(payload)}`);
    assert.equal(reply.code, 'invalid', `${command} ${JSON.stringify(payload)}: ${reply.message}`);
  }
  assert.deepEqual(readdirSync(path.join(r.workspace, PORTABLE_STATE_DIR)), []);
  // The link itself is the workspace's own: it may be stat'ed.
  const link = await r.command(FsStatCommand.type, { path: 'etc' });
  assert.ok(link.ok && link.entry.symlinkTarget === '/etc');
});
