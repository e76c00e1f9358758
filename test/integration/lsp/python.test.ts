import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { fixture, lspRun, type LspRun } from './helpers';

let t: TestGateway;
let r: LspRun;
before(async () => {
  t = await startTestGateway();
  r = await lspRun(t, fixture('py'));
});
after(async () => {
  if (r) await t.alice.deleteRun(r.runId).catch(() => undefined);
  await t?.close();
});

test('pyright: definition past non-ASCII text, type_definition, references, hover', async () => {
  assert.match(
    await r.ok('lsp', { action: 'definition', file: 'geometry/main.py', line: 3, symbol: 'Circle' }),
    /geometry\/shapes\.py:11: class Circle\(Shape\):/,
  );
  assert.match(
    await r.ok('lsp', { action: 'type_definition', file: 'geometry/main.py', line: 3, symbol: 'first' }),
    /geometry\/shapes\.py:11: class Circle\(Shape\):/,
  );
  const refs = await r.ok('lsp', { action: 'references', file: 'geometry/shapes.py', line: 19, symbol: 'total_area' });
  assert.match(refs, /^3 references/);
  assert.match(refs, /geometry\/main\.py:4: print\(banner, total_area\(\[first, Circle\(2\.0\)\]\)\)/);
  const hover = await r.ok('lsp', { action: 'hover', file: 'geometry/main.py', line: 4, symbol: 'total_area' });
  assert.match(hover, /def total_area\(shapes: list\[Shape\]\) -> float/);
  assert.match(hover, /Sums the areas of the shapes\./);
});

test('pyright: implementation is plainly unsupported; symbols by query and by file', async () => {
  assert.match(
    await r.fails('lsp', { action: 'implementation', file: 'geometry/shapes.py', line: 4, symbol: 'Shape' }),
    /pyright does not offer implementation/,
  );
  assert.match(
    await r.ok('lsp', { action: 'symbols', query: 'total_' }),
    /function total_area — geometry\/shapes\.py:19/,
  );
  const outline = await r.ok('lsp', { action: 'symbols', file: 'geometry/shapes.py' });
  assert.match(outline, /^class Circle — line 11$/m);
  assert.match(outline, /^ {2}method __init__ — line 12$/m);
});

test('pyright: diagnostics on write (once), of a file, code_actions, and the pyright CLI for "*"', async () => {
  const w = await r.ok('write', { path: 'geometry/bad.py', content: 'count: int = "many"\n' });
  assert.match(
    w,
    /new diagnostics in geometry\/bad\.py \(pyright\):\ngeometry\/bad\.py:1:14: error \[reportAssignmentType\]/,
  );
  assert.doesNotMatch(
    await r.ok('write', { path: 'geometry/bad.py', content: '\n\ncount: int = "many"\n' }),
    /diagnostics/,
  );
  assert.match(
    await r.ok('lsp', { action: 'diagnostics', file: 'geometry/bad.py' }),
    /geometry\/bad\.py:3:14: error \[reportAssignmentType\]/,
  );
  assert.match(
    await r.ok('lsp', { action: 'code_actions', file: 'geometry/bad.py', line: 3, symbol: 'count' }),
    /code action|no code actions/,
  );
  const all = await r.ok('lsp', { action: 'diagnostics', file: '*' });
  assert.match(all, /checker: pyright in \. \(workspace root\) — exit 1/);
  assert.match(all, /geometry\/bad\.py:3:14 - error/);
});

test("pyright's project check leads with its totals when its listing is cut", async () => {
  const many = Array.from({ length: 400 }, (_, i) => `v${i}: int = "s"`).join('\n');
  await r.ok('write', { path: 'geometry/many.py', content: `${many}\n` });
  const all = await r.ok('lsp', { action: 'diagnostics', file: '*' });
  const totals = /^totals: (\d+) errors, \d+ warnings? in \d+ files?$/m.exec(all);
  assert.ok(totals && Number(totals[1]) >= 400, all.slice(0, 400));
  assert.match(all, /^most in: geometry\/many\.py \(400\)/m);
  assert.match(all, /… showing 200 of \d+ lines/);
  await r.ok('write', { path: 'geometry/many.py', content: 'fine = 1\n' });
});

test('pyright: rename across files; an invalid name is refused', async () => {
  assert.match(
    await r.fails('lsp_rename', { file: 'geometry/shapes.py', line: 19, symbol: 'total_area', new_name: 'total-area' }),
    /not a valid Python identifier/,
  );
  const out = await r.ok('lsp_rename', {
    file: 'geometry/shapes.py',
    line: 19,
    symbol: 'total_area',
    new_name: 'sum_areas',
  });
  assert.match(out, /renamed "total_area" to "sum_areas": 3 edit\(s\) in 2 file\(s\)/);
  assert.match(await r.ok('read', { path: 'geometry/main.py' }), /from geometry\.shapes import Circle, sum_areas/);
});
