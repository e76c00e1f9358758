import { test } from 'node:test';
import assert from 'node:assert/strict';
import { locateSymbol } from '../../../runner/src/tools/lsp/position';

const text = 'const banner = "🙂 größe"; const first = new Circle(1);\nfoo(x) + foo(y)\r\n.push(item)\n';

test('columns are UTF-16 code units: an emoji before the symbol counts twice', () => {
  const { position } = locateSymbol(text, 1, 'Circle');
  assert.equal(position.line, 0);
  // "🙂" is 2 UTF-16 units; counting code points would give one less and miss the symbol.
  assert.equal(position.character, text.split('\n')[0].indexOf('Circle'));
  assert.equal(position.character, [...'const banner = "🙂 größe"; const first = new '].length + 1);
});

test('a substring twice on the line is refused, listing both; occurrence picks one', () => {
  assert.throws(
    () => locateSymbol(text, 2, 'foo'),
    /occurs 2 times on line 2 \(#1 at column 1: …foo\(x\) \+ foo\(y\)…; #2 at column 10: .*\); pass occurrence \(1-2\)/,
  );
  assert.equal(locateSymbol(text, 2, 'foo', 2).position.character, 9);
  assert.throws(() => locateSymbol(text, 2, 'foo', 3), /occurrence 3 asked, but "foo" occurs 2 time\(s\)/);
});

test('a symbol not on the line shows the line; CR of CRLF is not part of it', () => {
  assert.throws(
    () => locateSymbol(text, 2, 'bar'),
    /symbol "bar" is not on line 2; line 2 reads: "foo\(x\) \+ foo\(y\)"/,
  );
});

test('the position lands on the first identifier character of the match', () => {
  assert.equal(locateSymbol(text, 3, '.push').position.character, 1);
  assert.deepEqual(locateSymbol(text, 3, '.push').range.start, { line: 2, character: 0 });
});

test('line 0 and lines past the end are out of range (a trailing newline is not a line)', () => {
  assert.throws(() => locateSymbol(text, 0, 'foo'), /line 0 is out of range: the file has 3 lines/);
  assert.throws(() => locateSymbol(text, 4, 'foo'), /line 4 is out of range/);
});
