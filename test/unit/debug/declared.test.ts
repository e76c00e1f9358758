import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { loadDeclaredAdapters } from '../../../runner/src/tools/debug/declared';
import { adapterSpec, adapterTable, candidatesFor, describeTried } from '../../../runner/src/tools/debug/table';
import { adapterForFile } from '../../../runner/src/tools/debug/availability';

function dirWith(files: Record<string, unknown>): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-debugd-'));
  for (const [name, content] of Object.entries(files))
    writeFileSync(path.join(dir, name), typeof content === 'string' ? content : JSON.stringify(content));
  return dir;
}

const gdb = {
  id: 'gdb',
  languages: 'Fortran',
  extensions: ['.f90'],
  rootMarkers: ['fpm.toml'],
  command: '/bin/sh',
  args: ['-c', 'exit 0'],
  launch: { stopAtBeginningOfMainSubprogram: true, program: 'overridden' },
  // biome-ignore lint/suspicious/noTemplateCurlyInString: the placeholder a debug.d file writes
  attach: { target: 'localhost:${port}', pid: '${port}' },
};

test('debug.d: a declared adapter becomes a spec; bad files are reported, not fatal', () => {
  const dir = dirWith({
    'a-gdb.json': gdb,
    'b-broken.json': '{ not json',
    'c-missing.json': { id: 'x', languages: 'X', extensions: ['.x'], rootMarkers: ['x'] },
    'd-twice.json': [gdb],
    'notes.txt': 'ignored',
  });
  const { adapters, problems } = loadDeclaredAdapters(dir);
  assert.deepEqual(
    adapters.map((a) => a.id),
    ['gdb'],
  );
  assert.equal(problems.length, 3, problems.join('\n'));
  assert.match(problems[0], /b-broken\.json: not readable JSON/);
  assert.match(problems[1], /c-missing\.json: .*command/);
  assert.match(problems[2], /d-twice\.json\[0\]: adapter id gdb is declared twice/);

  const spec = adapters[0];
  assert.equal(spec.source, path.join(dir, 'a-gdb.json'));
  assert.equal(spec.command, '/bin/sh -c exit 0');
  const launch = spec.launchArguments({
    program: '/w/a.out',
    args: ['1'],
    cwd: '/w',
    scratchDir: '/tmp/s',
    command: { command: '/bin/sh', args: [], transport: 'stdio', env: {}, detail: '' },
  });
  // The launch fills program, args and cwd over the declared defaults.
  assert.deepEqual(launch, {
    name: 'tether',
    request: 'launch',
    stopAtBeginningOfMainSubprogram: true,
    program: '/w/a.out',
    args: ['1'],
    cwd: '/w',
  });
  assert.deepEqual(spec.attachArguments(4711), {
    name: 'tether',
    request: 'attach',
    target: 'localhost:4711',
    pid: 4711,
  });
});

test('debug.d: declared adapters come first, replace a built-in of the same id, and win their extensions', async () => {
  const dir = dirWith({ 'gdb.json': gdb, 'debugpy.json': { ...gdb, id: 'debugpy', extensions: ['.py'] } });
  const t = adapterTable(loadDeclaredAdapters(dir));
  assert.deepEqual(
    t.specs.map((s) => s.id),
    ['debugpy', 'gdb', 'dart', 'lldb', 'delve'],
  );
  assert.equal(adapterSpec('debugpy', t)?.source, path.join(dir, 'debugpy.json'));
  assert.equal(adapterSpec('nope', t), undefined);
  assert.match(describeTried(t), /^debugpy \(Fortran: \.py\), gdb \(Fortran: \.f90\), dart/);

  const ws = mkdtempSync(path.join(os.tmpdir(), 'tether-debugd-ws-'));
  mkdirSync(path.join(ws, 'app'));
  writeFileSync(path.join(ws, 'app/main.f90'), 'program main\nend program main\n');
  writeFileSync(path.join(ws, 'fpm.toml'), 'name = "x"\n');
  assert.deepEqual(await candidatesFor(path.join(ws, 'app/main.f90'), t), ['gdb']);
  const a = await adapterForFile(adapterSpec('gdb', t)!, ws, path.join(ws, 'app'));
  assert.equal(a.available, true);
  assert.equal(a.root?.dir, ws);
  assert.match(a.binary?.detail ?? '', /\/bin\/sh; declared in .*gdb\.json$/);

  const missing = loadDeclaredAdapters(dirWith({ 'g.json': { ...gdb, command: 'no-such-debugger-here' } }));
  const m = await adapterForFile(missing.adapters[0], ws, ws);
  assert.equal(m.available, false);
  assert.equal(m.binaryMissing, 'no-such-debugger-here not found');
});

test('debug.d: no folder means the built-in adapters alone', () => {
  const t = adapterTable(loadDeclaredAdapters('/nonexistent/debug.d'));
  assert.deepEqual(
    t.specs.map((s) => s.id),
    ['dart', 'debugpy', 'lldb', 'delve'],
  );
  assert.deepEqual(t.problems, []);
});
