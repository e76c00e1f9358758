import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as vm from 'node:vm';
import { CellSyntaxError, prepareCell } from '../../../runner/src/tools/eval/javascript/cellSource';

/** Runs prepared cells one after another in one fresh context, as the kernel does. */
async function session(cells: string[]): Promise<unknown[]> {
  const ctx = vm.createContext({});
  const out: unknown[] = [];
  for (const code of cells) {
    const p = prepareCell(code);
    let v = new vm.Script(p.source).runInContext(ctx);
    if (p.async) v = ((await v) as { value?: unknown } | undefined)?.value;
    out.push(p.echoes ? v : undefined);
  }
  return out;
}

test('plain cells: let/const/class may be declared again by a later cell; the last expression is the value', async () => {
  assert.deepEqual(
    await session([
      'let a = 1; const b = 2; a + b',
      'const a = 10; a',
      'class K { v() { return 1 } }',
      'class K { v() { return 2 } }; new K().v()',
    ]),
    [3, 10, undefined, 2],
  );
});

test('a cell ending in a declaration echoes nothing, even though the script has a completion value', async () => {
  assert.deepEqual(await session(['1 + 1; var z = 5', 'z']), [undefined, 5]);
});

test('top-level await: declarations (destructuring, functions, classes) outlive the cell', async () => {
  const values = await session([
    'const { p, q: [r] } = await Promise.resolve({ p: 1, q: [2] }); let s; function f() { return p + r } class C {}',
    'f() + (s === undefined ? 100 : 0)',
    'const t = await f(); t * 2',
  ]);
  assert.deepEqual(values, [undefined, 103, 6]);
});

test('await inside a function alone does not make the cell async', () => {
  assert.equal(prepareCell('async function g() { await 1 }\ng').async, false);
  assert.equal(prepareCell('for await (const x of []) {}').async, true);
});

test('rewrites keep line numbers', () => {
  const code = 'const x = 1\nawait null\nthrow new Error("line 3")';
  const p = prepareCell(code);
  assert.equal(
    p.source.split('\n').findIndex((l) => l.includes('line 3')),
    2,
  );
});

test('a syntax error names the line and column', () => {
  assert.throws(
    () => prepareCell('let ok = 1\nlet = = 2'),
    (e: unknown) => e instanceof CellSyntaxError && e.line === 2 && /Unexpected token/.test(e.message),
  );
});

test('static imports become dynamic ones, so a cell may import like a module', async () => {
  const p = prepareCell(
    'import path, { join as j, sep } from "node:path"\nimport * as os from "node:os"\nj("a", "b") + sep + typeof path.join + typeof os.cpus',
  );
  assert.equal(p.async, true);
  assert.match(
    p.source,
    /\(\{ default: path, join: j, sep \} = await import\("node:path"\)\);\n\(os = await import\("node:os"\)\);/,
  );
  assert.throws(
    () => prepareCell('export const x = 1'),
    (e: unknown) => e instanceof CellSyntaxError && /use require\(\) or await import\(\)/.test(e.message),
  );
});
