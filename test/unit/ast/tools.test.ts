import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import Ajv from 'ajv';
import { runnerContext, runnerFor } from '../../helpers/runner';
import type { ToolResult } from '../../../protocol/src/tools';
import { editSchema, grepSchema, resolveSchema } from '../../../runner/src/tools/ast/schemas';

const textOf = (r: ToolResult) => r.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');
const put = (root: string, rel: string, content: string) => {
  mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
  writeFileSync(path.join(root, rel), content);
};
const read = (root: string, rel: string) => readFileSync(path.join(root, rel), 'utf8');

const DART_WIDGET = readFileSync(path.resolve(__dirname, '../../../../test/fixtures/ast/dart/widget.dart'), 'utf8');

test('registered only when the run has the ast feature', async () => {
  const off = await runnerFor({ ast: false });
  assert.equal(off.registry.has('ast_grep'), false);
  const on = await runnerFor({ ast: true });
  for (const name of ['ast_grep', 'ast_edit', 'resolve']) assert.ok(on.registry.has(name), name);
  const tiers = Object.fromEntries(on.registry.list().map((t) => [t.name, t.tier]));
  assert.deepEqual([tiers.ast_grep, tiers.ast_edit, tiers.resolve], ['read', 'write', 'write']);
});

test('dart: a guard that disposes what it checked matches, one that disposes something else does not', async () => {
  const { call, workspace } = await runnerFor({ ast: true });
  put(workspace, 'lib/widget.dart', DART_WIDGET);
  const r = await call('ast_grep', { pattern: 'if ($X != null) $X.dispose()', language: 'dart' });
  assert.ok(!r.isError, textOf(r));
  const s = r.structured as {
    total: number;
    matches: { file: string; start_line: number; text: string; captures: Record<string, string> }[];
  };
  assert.equal(s.total, 1);
  assert.deepEqual(
    s.matches.map((m) => [m.file, m.start_line, m.text, m.captures.X]),
    [['lib/widget.dart', 10, 'if (main != null) main.dispose();', 'main']],
  );
});

test('dart: dispose($X) → $X.dispose() staged across four files, written on accept', async () => {
  const { call, workspace } = await runnerFor({ ast: true });
  for (let i = 1; i <= 4; i++) put(workspace, `lib/w${i}.dart`, DART_WIDGET);
  const r = await call('ast_edit', { pattern: 'dispose($X)', rewrite: '$X.dispose()', language: 'dart' });
  assert.ok(!r.isError, textOf(r));
  assert.match(textOf(r), /^\(proposed\) 12 replacements in 4 files/);
  assert.match(textOf(r), /call resolve with edit_id "edit_1"/);
  assert.match(textOf(r), /- dispose\(other\)\n\+ other\.dispose\(\)/);
  assert.equal(read(workspace, 'lib/w1.dart'), DART_WIDGET, 'nothing is written before resolve');
  const ok = await call('resolve', { edit_id: 'edit_1', action: 'accept' });
  assert.ok(!ok.isError, textOf(ok));
  const expected = DART_WIDGET.replace('    dispose(other);', '    other.dispose();')
    .replace('    dispose(c);', '    c.dispose();')
    .replace('    dispose(main);', '    main.dispose();');
  assert.notEqual(expected, DART_WIDGET);
  for (let i = 1; i <= 4; i++) assert.equal(read(workspace, `lib/w${i}.dart`), expected);
  // The declaration `void dispose(Controller? c) {}` is not a call and stays.
  assert.match(expected, /void dispose\(Controller\? c\) \{\}/);
});

async function fourFileEdit(settings: Record<string, unknown> = {}) {
  const h = await runnerFor({ ast: true }, settings);
  for (let i = 1; i <= 4; i++)
    put(h.workspace, `src/m${i}.py`, `def f${i}(x):\n    print(x)\n    return old_api(x, ${i})\n`);
  const r = await h.call('ast_edit', { pattern: 'old_api($A, $B)', rewrite: 'new_api($B, $A)', language: 'python' });
  assert.ok(!r.isError, textOf(r));
  assert.match(textOf(r), /\(proposed\) 4 replacements in 4 files/);
  const before = [1, 2, 3, 4].map((i) => read(h.workspace, `src/m${i}.py`));
  return { ...h, before, id: (r.structured as { edit_id: string }).edit_id };
}

test('resolve accept refuses the whole change when one of four files changed meanwhile', async () => {
  const { call, workspace, before, id } = await fourFileEdit();
  put(workspace, 'src/m3.py', `${before[2]}# touched\n`);
  const r = await call('resolve', { edit_id: id, action: 'accept' });
  assert.equal(r.isError, true);
  assert.match(textOf(r), /nothing was written/);
  assert.match(textOf(r), /src\/m3\.py/);
  assert.deepEqual(
    [1, 2, 4].map((i) => read(workspace, `src/m${i}.py`)),
    [before[0], before[1], before[3]],
  );
  assert.equal(read(workspace, 'src/m3.py'), `${before[2]}# touched\n`);
  const again = await call('resolve', { edit_id: id, action: 'accept' });
  assert.match(textOf(again), /already resolved \(rejected\)/);
});

test('resolve accept rolls back when a target is read-only, and a second resolve is refused', async () => {
  const { call, workspace, before, id } = await fourFileEdit();
  chmodSync(path.join(workspace, 'src/m4.py'), 0o444);
  const r = await call('resolve', { edit_id: id, action: 'accept' });
  assert.equal(r.isError, true);
  assert.match(textOf(r), /nothing was written.*read-only/);
  assert.deepEqual(
    [1, 2, 3, 4].map((i) => read(workspace, `src/m${i}.py`)),
    before,
  );
  chmodSync(path.join(workspace, 'src/m4.py'), 0o644);
  const ok = await call('resolve', { edit_id: id, action: 'accept' });
  assert.ok(!ok.isError, textOf(ok));
  assert.match(read(workspace, 'src/m1.py'), /return new_api\(1, x\)/);
  const twice = await call('resolve', { edit_id: id, action: 'accept' });
  assert.equal(twice.isError, true);
  assert.match(textOf(twice), /edit_1 was already resolved \(accepted\)/);
});

test('resolve: discard, unknown ids and expiry', async () => {
  const { call, workspace, before, id } = await fourFileEdit({ ast: { editTtlMinutes: 0.001 } });
  const unknown = await call('resolve', { edit_id: 'edit_99', action: 'accept' });
  assert.match(textOf(unknown), /unknown edit_id "edit_99"; pending edits: edit_1/);
  await new Promise((r) => setTimeout(r, 120));
  const expired = await call('resolve', { edit_id: id, action: 'accept' });
  assert.equal(expired.isError, true);
  assert.match(textOf(expired), /edit_1 expired/);
  assert.deepEqual(
    [1, 2, 3, 4].map((i) => read(workspace, `src/m${i}.py`)),
    before,
  );

  const fresh = await fourFileEdit();
  const d = await fresh.call('resolve', { edit_id: fresh.id, action: 'discard' });
  assert.match(textOf(d), /discarded edit_1/);
  assert.deepEqual(
    [1, 2, 3, 4].map((i) => read(fresh.workspace, `src/m${i}.py`)),
    fresh.before,
  );
  assert.match(
    textOf(await fresh.call('resolve', { edit_id: fresh.id, action: 'accept' })),
    /already resolved \(discarded\)/,
  );
});

test('accept tells the write observers (diagnostics, caches) which files changed', async () => {
  const h = await fourFileEdit();
  const seen: string[] = [];
  h.run.observeWrites({
    async afterWrite(paths) {
      seen.push(...paths);
      return [{ type: 'text', text: 'observer saw the write' }];
    },
  });
  const r = await h.call('resolve', { edit_id: h.id, action: 'accept' });
  assert.match(textOf(r), /observer saw the write/);
  assert.deepEqual(seen.map((p) => path.basename(p)).sort(), ['m1.py', 'm2.py', 'm3.py', 'm4.py']);
});

test('bad input gets a clear error and changes nothing', async () => {
  const { call, workspace } = await runnerFor({ ast: true });
  put(workspace, 'a.py', 'print(1)\n');
  const err = async (args: unknown, re: RegExp, tool = 'ast_grep') => {
    const r = await call(tool, args);
    assert.equal(r.isError, true, JSON.stringify(args).slice(0, 80));
    assert.match(textOf(r), re);
  };
  await err({ pattern: '' }, /pattern is empty/);
  await err({ pattern: '   ' }, /pattern is empty/);
  await err({ pattern: 'def (:', language: 'python' }, /does not parse as python: .* at line 1, column \d+/);
  await err({ pattern: 'print($A)', language: 'klingon' }, /unknown language "klingon"; supported: .*python.*rust/);
  await err({ pattern: 'print($A)', path: '../outside' }, /escapes the workspace/);
  await err({ pattern: 'print($A)', path: '/etc' }, /escapes the workspace/);
  for (const max of [0, -1, 1e9, 2.5])
    await err({ pattern: 'print($A)', max_results: max }, /max_results must be an integer from 1 to 1000/);
  await err({ pattern: 'x'.repeat(2 * 1024 * 1024), language: 'python' }, /limit is 10000/);
  await err({ pattern: 'a b c', language: 'python' }, /separate python nodes|does not parse/);
  await err({ pattern: 'print($A)', path: 'missing.py' }, /path not found/);
  await err({ pattern: 'print($A)', rewrite: 'x', path: '../x' }, /escapes the workspace/, 'ast_edit');
  await err({ edit_id: 'nope', action: 'accept' }, /unknown edit_id/, 'resolve');
  await err({ edit_id: 'edit_1', action: 'maybe' }, /action must be "accept" or "discard"/, 'resolve');
  assert.equal(read(workspace, 'a.py'), 'print(1)\n');
});

test('the JSON schemas reject bad input at the edge', () => {
  const ajv = new Ajv({ allErrors: true });
  const grep = ajv.compile(grepSchema);
  assert.equal(grep({ pattern: 'f($A)' }), true);
  for (const bad of [
    { pattern: '' },
    { pattern: 'f', max_results: 0 },
    { pattern: 'f', max_results: -1 },
    { pattern: 'f', max_results: 1e9 },
    { pattern: 'x'.repeat(2 * 1024 * 1024) },
    { pattern: 'f', extra: 1 },
  ]) {
    assert.equal(grep(bad), false, JSON.stringify(bad).slice(0, 60));
  }
  assert.equal(ajv.compile(editSchema)({ pattern: 'f($A)' }), false, 'rewrite is required');
  const resolve = ajv.compile(resolveSchema);
  assert.equal(resolve({ edit_id: 'edit_1', action: 'accept' }), true);
  assert.equal(resolve({ edit_id: '../etc', action: 'accept' }), false);
  assert.equal(resolve({ edit_id: 'edit_1', action: 'apply' }), false);
});

test('max_results cuts the list and the total is still reported', async () => {
  const { call, workspace } = await runnerFor({ ast: true });
  put(workspace, 'many.py', `${Array.from({ length: 30 }, (_, i) => `print(${i})`).join('\n')}\n`);
  const r = await call('ast_grep', { pattern: 'print($N)', max_results: 5 });
  const s = r.structured as {
    total: number;
    shown: number;
    matches: { start_line: number; captures: { N: string } }[];
  };
  assert.equal(s.total, 30);
  assert.equal(s.shown, 5);
  assert.deepEqual(
    s.matches.map((m) => m.captures.N),
    ['0', '1', '2', '3', '4'],
  );
  assert.match(textOf(r), /^30 matches in 1 file, showing the first 5/);
});

test('directory search: each file in its own language; .gitignore, binary and large files', async () => {
  const { call, workspace } = await runnerFor({ ast: true }, { ast: { maxFileBytes: 4096 } });
  put(workspace, 'a.py', 'foo(1)\n');
  put(workspace, 'b.ts', 'foo(2);\n');
  put(workspace, 'c.go', 'package main\nfunc main() { foo(3) }\n');
  put(workspace, '.gitignore', 'build/\n*.gen.py\n');
  put(workspace, 'build/out.py', 'foo(4)\n');
  put(workspace, 'x.gen.py', 'foo(5)\n');
  put(workspace, 'blob.py', 'foo(6)\n\0\0binary');
  put(workspace, 'big.py', `foo(7)\n${'# pad\n'.repeat(2000)}`);
  const r = await call('ast_grep', { pattern: 'foo($A)' });
  const s = r.structured as {
    total: number;
    matches: { file: string }[];
    stats: { skippedBinary: number; skippedLarge: number };
  };
  assert.deepEqual(s.matches.map((m) => m.file).sort(), ['a.py', 'b.ts', 'c.go']);
  assert.equal(s.stats.skippedBinary, 1);
  assert.equal(s.stats.skippedLarge, 1);
  assert.match(textOf(r), /1 binary skipped; 1 too large skipped/);
  // A pattern that only parses as Python searches the Python files and says where it did not parse.
  const py = await call('ast_grep', { pattern: 'def $F():\n    pass' });
  assert.ok(!py.isError, textOf(py));
  assert.match(textOf(py), /pattern does not parse as .*typescript/);
  const single = await call('ast_grep', { pattern: 'foo($A)', path: 'b.ts' });
  assert.equal((single.structured as { total: number }).total, 1);
  assert.match(textOf(await call('ast_grep', { pattern: 'foo($A)', path: '.gitignore' })), /cannot tell the language/);
});

test('the tree cache serves repeated queries and sees changes (write tools and outside edits)', async () => {
  const { call, workspace } = await runnerFor({ ast: true });
  put(workspace, 'a.py', 'foo(1)\n');
  const count = async () =>
    ((await call('ast_grep', { pattern: 'foo($A)', language: 'python' })).structured as { total: number }).total;
  assert.equal(await count(), 1);
  assert.equal(await count(), 1);
  const w = await call('write', { path: 'a.py', content: 'foo(1)\nfoo(2)\n' });
  assert.ok(!w.isError, textOf(w));
  assert.equal(await count(), 2);
  writeFileSync(path.join(workspace, 'a.py'), 'foo(1)\nfoo(2)\nfoo(3)\n');
  assert.equal(await count(), 3);
});

test('a cancelled search stops and says so', async () => {
  const { call, workspace } = await runnerFor({ ast: true });
  for (let i = 0; i < 400; i++) put(workspace, `many/m${i}.py`, `def f(x):\n    return g(x, ${i})\n`.repeat(50));
  const ac = new AbortController();
  const pending = call('ast_grep', { pattern: 'g($A, $B)', language: 'python' }, runnerContext({ signal: ac.signal }));
  setTimeout(() => ac.abort('stop'), 20);
  const r = await pending;
  assert.equal(r.isError, true);
  assert.match(textOf(r), /cancelled/);
  // The workers are free again afterwards.
  const again = await call('ast_grep', { pattern: 'g($A, $B)', language: 'python', path: 'many/m1.py' });
  assert.equal((again.structured as { total: number }).total, 50);
});

test('dart: more hand-written expectations (statement lists, independent metavariables, rewrite indentation)', async () => {
  const { call, workspace } = await runnerFor({ ast: true });
  put(workspace, 'lib/widget.dart', DART_WIDGET);
  put(
    workspace,
    'bin/main.dart',
    'void main() {\n  if (ready) {\n    start();\n    run(1);\n  }\n  while (busy) {\n    wait();\n  }\n}\n',
  );
  const grep = async (pattern: string) => {
    const r = await call('ast_grep', { pattern, language: 'dart' });
    assert.ok(!r.isError, textOf(r));
    return (
      r.structured as { matches: { file: string; start_line: number; captures: Record<string, unknown> }[] }
    ).matches.map((m) => [m.file, m.start_line, m.captures]);
  };
  assert.deepEqual(await grep('$A.dispose()'), [
    ['lib/widget.dart', 10, { A: 'main' }],
    ['lib/widget.dart', 11, { A: 'main' }],
  ]);
  assert.deepEqual(await grep('if ($X != null) $Y.dispose()'), [
    ['lib/widget.dart', 10, { X: 'main', Y: 'main' }],
    ['lib/widget.dart', 11, { X: 'other', Y: 'main' }],
  ]);
  assert.deepEqual(await grep('if ($C) { $$$B }'), [['bin/main.dart', 2, { C: 'ready', B: ['start();', 'run(1);'] }]]);
  assert.deepEqual(await grep('while ($C) { $$$B }'), [['bin/main.dart', 6, { C: 'busy', B: ['wait();'] }]]);
  const e = await call('ast_edit', { pattern: 'if ($C) { $$$B }', rewrite: 'if (!($C)) return;\n$$$B', path: 'bin' });
  assert.match(textOf(e), /^\(proposed\) 1 replacement in 1 file/);
  const ok = await call('resolve', { edit_id: (e.structured as { edit_id: string }).edit_id, action: 'accept' });
  assert.ok(!ok.isError, textOf(ok));
  assert.equal(
    read(workspace, 'bin/main.dart'),
    'void main() {\n  if (!(ready)) return;\n  start();\n  run(1);\n  while (busy) {\n    wait();\n  }\n}\n',
  );
});
