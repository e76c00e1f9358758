import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { fixture, lspRun, type LspRun } from './helpers';

let t: TestGateway;
let r: LspRun;
before(async () => {
  t = await startTestGateway();
  r = await lspRun(t, fixture('c'));
});
after(async () => {
  if (r) await t.alice.deleteRun(r.runId).catch(() => undefined);
  await t?.close();
});

test('clangd: definition, type_definition, implementation, references, hover', async () => {
  assert.match(
    await r.ok('lsp', { action: 'definition', file: 'main.c', line: 6, symbol: 'circle_area' }),
    /shapes\.h:10: double circle_area\(const struct circle \*c\);/,
  );
  assert.match(
    await r.ok('lsp', { action: 'type_definition', file: 'main.c', line: 5, symbol: 'unit' }),
    /shapes\.h:5: struct circle \{/,
  );
  // C has no implementations to find: an empty answer, said plainly.
  assert.match(
    await r.ok('lsp', { action: 'implementation', file: 'main.c', line: 6, symbol: 'circle_area' }),
    /no implementation\(s\) found/,
  );
  const refs = await r.ok('lsp', { action: 'references', file: 'main.c', line: 6, symbol: 'circle_area' });
  assert.match(refs, /main\.c:7: printf\("%f %f\\n", a, circle_area\(&unit\)\);/);
  assert.match(
    await r.ok('lsp', { action: 'hover', file: 'main.c', line: 6, symbol: 'circle_area' }),
    /The area of a circle\./,
  );
});

test('clangd: symbols, diagnostics on write, code_actions, and gcc for "*"', async () => {
  assert.match(await r.ok('lsp', { action: 'symbols', query: 'circle_ar' }), /function circle_area — shapes\.h:10/);
  assert.match(await r.ok('lsp', { action: 'symbols', file: 'main.c' }), /^function main int \(void\) — line 4$/m);
  const w = await r.ok('write', {
    path: 'bad.c',
    content: '#include "shapes.h"\ndouble f(void) { struct circle unit = {1.0}; return circle_area(&unti); }\n',
  });
  assert.match(
    w,
    /new diagnostics in bad\.c \(clangd\):\nbad\.c:2:66: error \[undeclared_var_use_suggest\] Use of undeclared identifier 'unti'; did you mean 'unit'\?/,
  );
  assert.match(await r.ok('lsp', { action: 'diagnostics', file: 'bad.c' }), /bad\.c:2:66: error/);
  assert.match(
    await r.ok('lsp', { action: 'code_actions', file: 'bad.c', line: 2, symbol: 'unti' }),
    /change 'unti' to 'unit' \[quickfix\] \(preferred\)/,
  );
  const all = await r.ok('lsp', { action: 'diagnostics', file: '*' });
  assert.match(
    all,
    /checker: gcc -fsyntax-only -Wall \(3 file\(s\)\) in \. \(workspace root\) — exit 1, [\d.]+ s\ntotals: 1 error, 1 warning, 1 note in 1 file\n/,
  );
  assert.match(all, /bad\.c:2:66: error: .unti. undeclared/);
});

test('clangd: rename across the files it has open', async () => {
  await r.ok('lsp', { action: 'hover', file: 'shapes.c', line: 3, symbol: 'circle_area' });
  const out = await r.ok('lsp_rename', { file: 'main.c', line: 5, symbol: 'unit', new_name: 'one' });
  assert.match(out, /renamed "unit" to "one": 3 edit\(s\) in 1 file\(s\)/);
  assert.match(await r.ok('read', { path: 'main.c' }), /struct circle one = \{1\.0\};/);
  assert.match(
    await r.fails('lsp_rename', { file: 'main.c', line: 5, symbol: 'one', new_name: 'int' }),
    /reserved word in C\/C\+\+/,
  );
});
