import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { SurfaceMode } from '@tether/contract';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { fixture, killInRun, lspRun, pidOf, type LspRun } from './helpers';

// One run shared by every case: a TypeScript project with a Go module nested in it.
let t: TestGateway;
let r: LspRun;
before(async () => {
  t = await startTestGateway();
  r = await lspRun(t, { ...fixture('ts'), ...fixture('go', 'tools/geo') });
});
after(async () => {
  if (r) await t.alice.deleteRun(r.runId).catch(() => undefined);
  await t?.close();
});

test('lsp is read tier, lsp_rename write tier; a run without the feature has neither', async () => {
  const plan = (await t.alice.listTools(r.runId, { mode: SurfaceMode.PLAN })).map((x) => x.name);
  assert.ok(plan.includes('lsp') && !plan.includes('lsp_rename'), plan.join(', '));
  assert.ok((await t.alice.listTools(r.runId)).some((x) => x.name === 'lsp_rename'));
  const plain = await t.alice.createRun({});
  assert.ok(!(await t.alice.listTools(plain.runId)).some((x) => x.name.startsWith('lsp')));
  await t.alice.deleteRun(plain.runId);
});

test('status: which servers can run for which root, and which half is missing for the others', async () => {
  const s = await r.ok('lsp', { action: 'status' });
  assert.match(
    s,
    /^typescript \(TypeScript, JavaScript\): can run \(starts on first use\); roots: \. \(workspace root\)/m,
  );
  assert.match(s, /^gopls \(Go\): can run .*roots: tools\/geo/m);
  assert.match(s, /^pyright \(Python\): cannot run: no root marker/m);
  assert.match(s, /^dart \(Dart\): cannot run: no root marker and binary not found.*binary not found: dart/m);
  // The runner image has no rust-analyzer (a development host may).
  if (t.config.provider === 'docker')
    assert.match(
      s,
      /^rust-analyzer \(Rust\): cannot run: no root marker and binary not found.*binary not found: rust-analyzer/m,
    );
});

test('definition through an import, past non-ASCII text (UTF-16 columns)', async () => {
  // Line 3 has an emoji (two UTF-16 units) and umlauts before "Circle".
  const out = await r.ok('lsp', { action: 'definition', file: 'src/main.ts', line: 3, symbol: 'Circle' });
  assert.match(out, /src\/shapes\.ts:6: export class Circle implements Shape \{/);
});

test('type_definition, implementation, references, hover', async () => {
  assert.match(
    await r.ok('lsp', { action: 'type_definition', file: 'src/main.ts', line: 3, symbol: 'first' }),
    /src\/shapes\.ts:2: export interface Shape \{/,
  );
  const impl = await r.ok('lsp', { action: 'implementation', file: 'src/shapes.ts', line: 2, symbol: 'Shape' });
  assert.match(impl, /src\/shapes\.ts:6: export class Circle/);
  assert.match(impl, /src\/shapes\.ts:13: export class Square/);
  const refs = await r.ok('lsp', { action: 'references', file: 'src/shapes.ts', line: 21, symbol: 'totalArea' });
  assert.match(refs, /^4 references for src\/shapes\.ts:21 "totalArea":/);
  assert.match(refs, /src\/main\.ts:5: export const total = totalArea\(shapes\)/);
  const hover = await r.ok('lsp', {
    action: 'hover',
    file: 'src/main.ts',
    line: 5,
    symbol: 'totalArea',
    occurrence: 2,
  });
  assert.match(hover, /totalArea\(shapes: Shape\[\]\): number/);
  assert.match(hover, /Sums the areas of the shapes\./);
});

test('symbols: workspace query and file outline', async () => {
  assert.match(await r.ok('lsp', { action: 'symbols', query: 'Square' }), /class Square — src\/shapes\.ts:13/);
  const outline = await r.ok('lsp', { action: 'symbols', file: 'src/shapes.ts' });
  assert.match(outline, /^interface Shape — line 2$/m);
  assert.match(outline, /^ {2}method area — line 8$/m);
});

test('diagnostics of a file, code_actions for it, and the project checker', async () => {
  const d = await r.ok('lsp', { action: 'diagnostics', file: 'src/fixme.ts' });
  assert.match(d, /src\/fixme\.ts:1:32: error \[2304\] Cannot find name 'circleArea'/);
  const actions = await r.ok('lsp', { action: 'code_actions', file: 'src/fixme.ts', line: 1, symbol: 'circleArea' });
  assert.match(actions, /Add missing function declaration 'circleArea' \[quickfix\]/);
  const all = await r.ok('lsp', { action: 'diagnostics', file: '*' });
  assert.match(
    all,
    /checker: tsc --noEmit -p tsconfig\.json in \. \(workspace root\) — exit 2, [\d.]+ s\ntotals: [1-9]\d* errors?, \d+ warnings? in [1-9]\d* files?\n/,
  );
  assert.match(all, /src\/fixme\.ts\(1,32\): error TS2304/);
  assert.match(all, /checker: go vet \.\/\.\.\. in tools\/geo — clean \(exit 0\)/);
});

test('nested root: a Go module inside the TypeScript repo is served by gopls for that module', async () => {
  const out = await r.ok('lsp', { action: 'definition', file: 'tools/geo/use.go', line: 8, symbol: 'TotalArea' });
  assert.match(out, /tools\/geo\/shapes\.go:21: func TotalArea\(shapes \[\]Shape\) float64 \{/);
  assert.match(await r.ok('lsp', { action: 'status' }), /^ {2}running for tools\/geo: pid \d+/m);
});

test('bad input: clear errors that show what is there', async () => {
  assert.match(await r.fails('lsp', { action: 'definition', file: 'src/main.ts', line: 3 }), /symbol/);
  assert.match(
    await r.fails('lsp', { action: 'definition', file: 'src/main.ts', line: 3, symbol: 'Triangle' }),
    /symbol "Triangle" is not on line 3; line 3 reads: "const banner = \\"🙂 größe\\"; const first: Shape = new Circle\(1\);"/,
  );
  const twice = await r.fails('lsp', { action: 'definition', file: 'src/main.ts', line: 5, symbol: 'totalArea' });
  assert.match(twice, /occurs 2 times on line 5 \(#1 at column 22: .*; #2 at column 42: .*\); pass occurrence \(1-2\)/);
  assert.match(await r.fails('lsp', { action: 'hover', file: 'src/main.ts', line: 0, symbol: 'x' }), /line/);
  assert.match(
    await r.fails('lsp', { action: 'hover', file: 'src/main.ts', line: 99, symbol: 'x' }),
    /line 99 is out of range: the file has 6 lines/,
  );
  assert.match(
    await r.fails('lsp', { action: 'hover', file: '../../etc/passwd', line: 1, symbol: 'root' }),
    /escapes the workspace/,
  );
  assert.match(await r.fails('lsp', { action: 'diagnostics', file: 'README.md' }), /file not found: README\.md/);
  assert.match(
    await r.fails('lsp_rename', { file: 'src/shapes.ts', line: 6, symbol: 'Circle', new_name: '2circle' }),
    /not a valid TypeScript\/JavaScript identifier/,
  );
  assert.match(
    await r.fails('lsp_rename', { file: 'src/shapes.ts', line: 6, symbol: 'Circle', new_name: 'class' }),
    /reserved word/,
  );
  assert.match(
    await r.fails('lsp_rename', { file: 'src/shapes.ts', line: 1, symbol: 'Something', new_name: 'Thing' }),
    /no renameable symbol|cannot rename/,
  );
});

test('diagnostics on write: reported once, not repeated when unrelated or moved, then exactly the new one', async () => {
  const first = await r.ok('write', { path: 'src/calc.ts', content: 'export const a: number = "one";\n' });
  assert.match(
    first,
    /new diagnostics in src\/calc\.ts \(typescript\):\nsrc\/calc\.ts:1:14: error \[2322\] Type 'string' is not assignable to type 'number'\./,
  );
  // An unrelated file, then an unrelated change to the same file: nothing repeated.
  assert.doesNotMatch(await r.ok('write', { path: 'src/other.ts', content: 'export const ok = 1;\n' }), /diagnostics/);
  assert.doesNotMatch(
    await r.ok('edit', { path: 'src/calc.ts', old_string: '"one";\n', new_string: '"one";\nexport const c = 3;\n' }),
    /diagnostics/,
  );
  // The bad line moves down four lines: same problem, not news.
  const moved = await r.ok('edit', {
    path: 'src/calc.ts',
    old_string: 'export const a',
    new_string: '// one\n// two\n// three\n// four\nexport const a',
  });
  assert.doesNotMatch(moved, /diagnostics/);
  // Fixed, and a new error brought in: exactly the new one.
  const patched = await r.ok('apply_patch', {
    patch: [
      '*** Begin Patch',
      '*** Update File: src/calc.ts',
      '@@',
      '-export const a: number = "one";',
      '+export const a: number = 1;',
      '+export const b: string = 2;',
      '*** End Patch',
    ].join('\n'),
  });
  const reported = patched.split('\n').filter((l) => l.startsWith('src/calc.ts:'));
  assert.deepEqual(reported, [
    "src/calc.ts:6:14: error [2322] Type 'number' is not assignable to type 'string'. (typescript)",
  ]);
});

test('rename across files: every file or none', async () => {
  const out = await r.ok('lsp_rename', { file: 'src/shapes.ts', line: 6, symbol: 'Circle', new_name: 'Disc' });
  assert.match(out, /renamed "Circle" to "Disc": \d+ edit\(s\) in 3 file\(s\)/);
  assert.match(out, /src\/main\.ts: 2 edit\(s\)/);
  assert.match(out, /src\/more\.ts: 2 edit\(s\)/);
  assert.match(
    await r.ok('read', { path: 'src/more.ts' }),
    /import \{ Disc \} from '\.\/shapes';[\s\S]*new Disc\(10\)/,
  );
  assert.match(
    await r.ok('lsp', { action: 'definition', file: 'src/more.ts', line: 3, symbol: 'Disc' }),
    /src\/shapes\.ts:6: export class Disc implements Shape/,
  );
});

test('a killed server restarts on the next call, and status shows the crash; reload restarts on purpose', async () => {
  const pid = pidOf(await r.ok('lsp', { action: 'status' }), 'typescript');
  killInRun(t, r.runId, pid);
  await new Promise((res) => setTimeout(res, 300));
  assert.match(
    await r.ok('lsp', { action: 'hover', file: 'src/shapes.ts', line: 21, symbol: 'totalArea' }),
    /totalArea\(shapes: Shape\[\]\): number/,
  );
  const s = await r.ok('lsp', { action: 'status' });
  assert.match(
    s,
    /last crash for \. \(workspace root\): .*\(killed by SIGKILL; 1 crash\(es\) this run; restarted on next call\)/,
  );
  assert.notEqual(pidOf(s, 'typescript'), pid);
  assert.match(
    await r.ok('lsp', { action: 'reload', file: 'src/main.ts' }),
    /restarted on next use: typescript \(\. \(workspace root\), was pid \d+\)/,
  );
  assert.match(
    await r.ok('lsp', { action: 'references', file: 'src/shapes.ts', line: 21, symbol: 'totalArea' }),
    /4 references/,
  );
});
