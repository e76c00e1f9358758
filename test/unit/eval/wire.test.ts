import { test } from 'node:test';
import assert from 'node:assert/strict';
import { JsonLineDecoder } from '../../../runner/src/tools/eval/wire';

test('messages split anywhere, even inside a multi-byte character, come out whole', () => {
  const got: unknown[] = [];
  const bad: string[] = [];
  const d = new JsonLineDecoder(
    (m) => got.push(m),
    (l) => bad.push(l),
  );
  const bytes = Buffer.from('{"t":"stream","text":"ünïcødé ✓"}\nnot json\n{"t":"done"}\n');
  for (let i = 0; i < bytes.length; i += 3) d.push(bytes.subarray(i, i + 3));
  assert.deepEqual(got, [{ t: 'stream', text: 'ünïcødé ✓' }, { t: 'done' }]);
  assert.deepEqual(bad, ['not json']);
});
