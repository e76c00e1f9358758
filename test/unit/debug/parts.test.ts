import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import Ajv from 'ajv';
import { OutputBuffer } from '../../../runner/src/tools/debug/outputBuffer';
import { findMarkerUp, findMarkersDown } from '../../../runner/src/util/rootMarkers';
import { ADAPTERS, adaptersForProgram } from '../../../runner/src/tools/debug/adapters';
import { adapterForFile, whyUnavailable } from '../../../runner/src/tools/debug/availability';
import { debugSchema } from '../../../runner/src/tools/debug/schemas';
import { DebugSupervisor, DEFAULT_DEBUG_SETTINGS, formatSeconds } from '../../../runner/src/tools/debug/supervisor';
import { allowsExec } from '../../../runner/src/tools/debug/scratch';
import { Workspace } from '../../../runner/src/workspace';
import { RunContext } from '../../../runner/src/run';
import { ToolRegistry } from '../../../runner/src/registry';
import { registerDebug } from '../../../runner/src/tools/debug';
import { NO_FEATURES, runnerFor, tempWorkspace } from '../../helpers/runner';

function write(file: string, content: string, mode = 0o644): void {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, content);
  chmodSync(file, mode);
}

async function withPath<T>(dirs: string[], fn: () => Promise<T>): Promise<T> {
  const old = process.env.PATH;
  process.env.PATH = dirs.join(path.delimiter);
  try {
    return await fn();
  } finally {
    process.env.PATH = old;
  }
}

test('output buffer: keeps the newest text under the cap, counts what it dropped, turns CRLF into LF', () => {
  const b = new OutputBuffer(10);
  b.push('stdout', 'abc\r\n');
  b.push('stdout', 'def');
  b.push('stderr', 'ghijk');
  assert.equal(b.read().droppedChars, 2);
  assert.deepEqual(b.read().chunks, [
    { category: 'stdout', text: 'c\ndef' },
    { category: 'stderr', text: 'ghijk' },
  ]);
  assert.equal(b.render(), 'c\ndef\n--- stderr ---\nghijk');
  b.push('stdout', 'x'.repeat(25));
  assert.equal(b.tail(100), 'x'.repeat(10));
  assert.equal(b.read().totalChars, 37);
  b.clear();
  assert.deepEqual(b.read(), { chunks: [], droppedChars: 0, totalChars: 0 });
});

test('root markers: nearest from the program up to the workspace root; a bounded search down for the listing', async () => {
  const ws = tempWorkspace();
  write(path.join(ws, 'requirements.txt'), '');
  write(path.join(ws, 'svc/api/pyproject.toml'), '');
  write(path.join(ws, 'svc/api/app.py'), '');
  write(path.join(ws, 'node_modules/x/go.mod'), '');
  assert.deepEqual(await findMarkerUp(ws, path.join(ws, 'svc/api'), ADAPTERS.debugpy.markers), {
    dir: path.join(ws, 'svc/api'),
    marker: 'pyproject.toml',
  });
  assert.deepEqual(await findMarkerUp(ws, path.join(ws, 'svc'), ADAPTERS.debugpy.markers), {
    dir: ws,
    marker: 'requirements.txt',
  });
  assert.equal(await findMarkerUp(ws, '/usr', ADAPTERS.debugpy.markers), undefined);
  assert.equal((await findMarkersDown(ws, ADAPTERS.debugpy.markers)).length, 2);
  assert.deepEqual(await findMarkersDown(ws, ADAPTERS.delve.markers), [], 'node_modules is not searched');
});

test("the adapter is picked from the program: .py or a python shebang, .go, a Go package folder, an ELF binary; anything else is nobody's", async () => {
  const ws = tempWorkspace();
  write(path.join(ws, 'a.py'), '');
  write(path.join(ws, 'pkg/main.go'), '');
  write(path.join(ws, 'm.dart'), '');
  write(path.join(ws, 'notes.txt'), 'hello');
  write(path.join(ws, 'tool'), '#!/usr/bin/env python3\nprint(1)\n', 0o755);
  copyFileSync(process.execPath, path.join(ws, 'bin'));
  assert.deepEqual(await adaptersForProgram(path.join(ws, 'a.py')), ['debugpy']);
  assert.deepEqual(await adaptersForProgram(path.join(ws, 'tool')), ['debugpy'], 'a python shebang');
  assert.deepEqual(await adaptersForProgram(path.join(ws, 'pkg/main.go')), ['delve']);
  assert.deepEqual(await adaptersForProgram(path.join(ws, 'pkg')), ['delve']);
  assert.deepEqual(await adaptersForProgram(path.join(ws, 'm.dart')), ['dart']);
  assert.deepEqual(
    await adaptersForProgram(path.join(ws, 'bin')),
    ['lldb', 'delve'],
    'a native binary: the markers decide',
  );
  assert.deepEqual(await adaptersForProgram(path.join(ws, 'notes.txt')), []);
  assert.equal(
    ADAPTERS.delve.launchArguments({
      program: path.join(ws, 'bin'),
      args: [],
      cwd: ws,
      scratchDir: ws,
      command: {} as never,
    }).mode,
    'exec',
  );
  assert.equal(
    ADAPTERS.delve.launchArguments({
      program: path.join(ws, 'pkg'),
      args: [],
      cwd: ws,
      scratchDir: ws,
      command: {} as never,
    }).mode,
    'debug',
  );
});

test('debugpy prefers the project-local .venv python over every python3 on PATH', async () => {
  const ws = tempWorkspace();
  const bin = tempWorkspace();
  write(path.join(ws, 'requirements.txt'), '');
  // Interpreters that "import debugpy" successfully: a script exiting 0.
  write(path.join(bin, 'python3'), '#!/bin/sh\nexit 0\n', 0o755);
  await withPath([bin], async () => {
    const without = await adapterForFile(ADAPTERS.debugpy, ws, ws);
    assert.equal(without.binary?.interpreter, path.join(bin, 'python3'));
    write(path.join(ws, '.venv/bin/python'), '#!/bin/sh\nexit 0\n', 0o755);
    const withVenv = await adapterForFile(ADAPTERS.debugpy, ws, ws);
    assert.ok(withVenv.available);
    assert.equal(withVenv.binary?.interpreter, path.join(ws, '.venv/bin/python'));
    assert.equal(withVenv.binary?.command, path.join(ws, '.venv/bin/python'));
  });
  // A venv without debugpy: the adapter runs on a python that has it, the program on the venv's.
  const ws2 = tempWorkspace();
  write(path.join(ws2, 'setup.py'), '');
  write(path.join(ws2, 'venv/bin/python'), '#!/bin/sh\nexit 1\n', 0o755);
  await withPath([bin], async () => {
    const a = await adapterForFile(ADAPTERS.debugpy, ws2, ws2);
    assert.equal(a.binary?.command, path.join(bin, 'python3'));
    assert.equal(a.binary?.interpreter, path.join(ws2, 'venv/bin/python'));
  });
  const none = tempWorkspace();
  write(path.join(none, 'python3'), '#!/bin/sh\nexit 1\n', 0o755);
  const bare = tempWorkspace();
  write(path.join(bare, 'requirements.txt'), '');
  await withPath([none], async () => {
    const a = await adapterForFile(ADAPTERS.debugpy, bare, bare);
    assert.equal(a.available, false);
    assert.match(whyUnavailable(a), /no python with debugpy: tried .*python3 \(no debugpy module\)/);
  });
});

test('lldb-dap is found under its Debian name lldb-dap-19; availability names the missing half', async () => {
  const ws = tempWorkspace();
  const bin = tempWorkspace();
  write(path.join(bin, 'lldb-dap-19'), '#!/bin/sh\n', 0o755);
  await withPath([bin], async () => {
    const noMarker = await adapterForFile(ADAPTERS.lldb, ws, ws);
    assert.equal(noMarker.available, false);
    assert.equal(noMarker.binary?.command, path.join(bin, 'lldb-dap-19'));
    assert.match(whyUnavailable(noMarker), /^root marker missing: none of Cargo.toml, CMakeLists.txt/);
    write(path.join(ws, 'CMakeLists.txt'), '');
    assert.ok((await adapterForFile(ADAPTERS.lldb, ws, ws)).available);
    const dart = await adapterForFile(ADAPTERS.dart, ws, ws);
    assert.match(whyUnavailable(dart), /binary missing: dart not on PATH.*root marker missing: none of pubspec.yaml/);
  });
});

test('schema: each op demands its own arguments; line 0 and unknown arguments are refused at the edge', () => {
  const check = new Ajv({ allErrors: true, strict: false }).compile(debugSchema);
  assert.ok(check({ op: 'status' }));
  assert.ok(check({ op: 'breakpoints', file: 'a.py', lines: [] }));
  assert.ok(!check({ op: 'breakpoints', file: 'a.py' }));
  assert.ok(!check({ op: 'breakpoints', file: 'a.py', lines: [0] }));
  assert.ok(!check({ op: 'launch' }));
  assert.ok(!check({ op: 'scopes' }));
  assert.ok(!check({ op: 'variables', reference: 0 }));
  assert.ok(!check({ op: 'attach', port: 70000 }));
  assert.ok(!check({ op: 'status', nonsense: 1 }));
  assert.ok(!check({ op: 'fly' }));
});

test('registration: only with the debug feature and a conversation id; exec tier, not parallel-safe', async () => {
  assert.ok(!(await runnerFor()).registry.has('debug'));
  const tool = (await runnerFor({ debug: true })).registry.list().find((t) => t.name === 'debug');
  assert.equal(tool?.tier, 'exec');
  assert.equal(tool?.parallelSafe, false);
  const run = new RunContext({
    runId: 'r',
    conversationId: '',
    workspace: tempWorkspace(),
    features: { ...NO_FEATURES, debug: true },
    settings: {},
  });
  const registry = new ToolRegistry();
  registerDebug(registry, run);
  assert.ok(!registry.has('debug'));
});

test('breakpoints before launch are kept; bad files and lines are refused and change nothing', async () => {
  const ws = tempWorkspace();
  write(path.join(ws, 'a.py'), 'x = 1\ny = 2\n');
  const sup = new DebugSupervisor('conv', new Workspace(ws), DEFAULT_DEBUG_SETTINGS);
  assert.deepEqual(await sup.setBreakpoints('a.py', [2, 1, 2]), { file: 'a.py', lines: [1, 2] });
  await assert.rejects(sup.setBreakpoints('../outside.py', [1]), /escapes the workspace/);
  await assert.rejects(sup.setBreakpoints('/etc/passwd', [1]), /escapes the workspace/);
  await assert.rejects(sup.setBreakpoints('a.py', [0]), /line 0 is not a line/);
  await assert.rejects(sup.setBreakpoints('a.py', [3]), /past the end of a.py \(2 lines\)/);
  await assert.rejects(sup.setBreakpoints('missing.py', [1]), /no such file/);
  assert.deepEqual([...sup.breakpoints.values()], [[1, 2]]);
  await sup.setBreakpoints('a.py', []);
  assert.equal(sup.breakpoints.size, 0);
  await assert.rejects(sup.require(), /no debug session is running/);
});

test('calls are serialized in arrival order, and a failing call does not block the next', async () => {
  const sup = new DebugSupervisor('conv', new Workspace(tempWorkspace()), DEFAULT_DEBUG_SETTINGS);
  const log: string[] = [];
  const slow = sup.serialize(async () => {
    log.push('a start');
    await new Promise((r) => setTimeout(r, 50));
    log.push('a end');
  });
  const failing = sup.serialize(async () => {
    log.push('b');
    throw new Error('b failed');
  });
  const fast = sup.serialize(async () => log.push('c'));
  await Promise.allSettled([slow, failing, fast]);
  assert.deepEqual(log, ['a start', 'a end', 'b', 'c']);
  await assert.rejects(failing, /b failed/);
});

test('durations read as a person would say them', () => {
  assert.equal(formatSeconds(1800), '30 minutes');
  assert.equal(formatSeconds(1799), '29m59s');
  assert.equal(formatSeconds(3), '3 seconds');
});

test('scratch space: a noexec mount is recognised from the mount table, the longest mount point deciding', async () => {
  const dir = tempWorkspace();
  const table = path.join(dir, 'mountinfo');
  writeFileSync(
    table,
    [
      '80 79 0:46 / / ro,relatime - overlay overlay rw',
      '102 83 0:48 / /tmp rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw',
      '103 83 0:49 / /tmp/exec\\040ok rw,nosuid,relatime - tmpfs tmpfs rw',
      '104 83 8:1 / /workspace rw,relatime - ext4 /dev/sda1 rw',
    ].join('\n'),
  );
  assert.equal(await allowsExec('/tmp/tether-debug-x', table), false);
  assert.equal(await allowsExec('/tmp/exec ok/bin', table), true);
  assert.equal(await allowsExec('/workspace/go', table), true);
  assert.equal(await allowsExec('/tmpfoo', table), true);
});
