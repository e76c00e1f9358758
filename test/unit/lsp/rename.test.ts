import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyTextEdits } from '../../../runner/src/tools/lsp/rename';
import { checkIdentifier } from '../../../runner/src/tools/lsp/identifiers';

const edit = (l1: number, c1: number, l2: number, c2: number, newText: string) => ({
  range: { start: { line: l1, character: c1 }, end: { line: l2, character: c2 } },
  newText,
});

test('edits apply in any order, with UTF-16 columns', () => {
  const text = 'const 🙂 = foo;\nfoo(foo);\n';
  const out = applyTextEdits(text, [edit(1, 0, 1, 3, 'bar'), edit(0, 11, 0, 14, 'bar'), edit(1, 4, 1, 7, 'bar')]);
  assert.equal(out, 'const 🙂 = bar;\nbar(bar);\n');
});

test('overlapping edits are refused', () => {
  assert.throws(() => applyTextEdits('abcdef', [edit(0, 0, 0, 3, 'x'), edit(0, 2, 0, 4, 'y')]), /overlapping edits/);
});

test('identifiers are checked per language', () => {
  assert.doesNotThrow(() => checkIdentifier('größe', 'typescript'));
  assert.doesNotThrow(() => checkIdentifier('$x', 'javascript'));
  assert.throws(() => checkIdentifier('$x', 'python'), /not a valid Python identifier/);
  assert.throws(() => checkIdentifier('a-b', 'go'), /not a valid Go identifier/);
  assert.throws(() => checkIdentifier('def', 'python'), /reserved word in Python/);
  assert.throws(() => checkIdentifier('größe', 'c'), /not a valid C\/C\+\+ identifier/);
});
