import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CellOutput } from '../../../runner/src/tools/eval/cellOutput';

const limits = { headChars: 10, tailChars: 5, maxItems: 2, imageChars: 100 };
const texts = (items: ReturnType<CellOutput['finish']>) =>
  items.map((i) => (i.type === 'text' ? i.text : `<${i.type}>`));

test('text and rich items keep their order', () => {
  const out = new CellOutput(limits);
  out.addText('a\n');
  out.addItem({ type: 'table', columns: ['x'], rows: [['1']] });
  out.addText('b\n');
  assert.deepEqual(texts(out.finish()), ['a\n', '<table>', 'b\n']);
});

test('past the head only a tail is kept, and the gap is counted', () => {
  const out = new CellOutput(limits);
  out.addText('0123456789abcdefghij');
  out.addText('KLMNO');
  assert.equal(out.omittedChars, 10);
  assert.equal(out.totalChars, 25);
  assert.deepEqual(texts(out.finish()), ['0123456789\n… 10 characters of output omitted …\nKLMNO']);
});

test('text the kernel dropped is counted and never enters the head', () => {
  const out = new CellOutput(limits);
  out.addText('head');
  out.addOmitted(1000);
  out.addText('tail');
  assert.equal(out.totalChars, 1008);
  assert.deepEqual(texts(out.finish()), ['head\n… 1000 characters of output omitted …\ntail']);
});

test('rich items past the cap (count or image bytes) are left out with a note', () => {
  const out = new CellOutput(limits);
  out.addItem({ type: 'image', mime: 'image/png', data: 'x'.repeat(90) });
  out.addItem({ type: 'image', mime: 'image/png', data: 'x'.repeat(20) });
  out.addItem({ type: 'text', text: 'one' });
  out.addItem({ type: 'text', text: 'two' });
  assert.deepEqual(texts(out.finish('closing')), [
    '<image>',
    'one',
    '… 2 more rich outputs (tables, images) left out\nclosing',
  ]);
});
