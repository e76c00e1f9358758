import { test } from 'node:test';
import assert from 'node:assert/strict';
import Ajv from 'ajv';
import { checkDescription, evalSchema } from '../../../runner/src/tools/eval/schemas';

const validate = new Ajv({ allErrors: true }).compile(evalSchema);

test('description: 5 to 10 words, in the schema and in the tool', () => {
  for (const [description, ok] of [
    ['four words only here', false],
    ['five words are just enough', true],
    ['  ten words are fine when the label is long enough  ', true],
    ['eleven words is one too many for a label in the transcript', false],
  ] as const) {
    assert.equal(validate({ code: '1', description }), ok, description);
    if (ok) checkDescription(description);
    else assert.throws(() => checkDescription(description), /description must be 5–10 words/);
  }
});

test('language and timeout are checked at the edge', () => {
  const base = { code: '1', description: 'five words are just enough' };
  assert.equal(validate({ ...base, language: 'ruby' }), false);
  assert.equal(validate({ ...base, timeout_seconds: 0 }), false);
  assert.equal(validate({ ...base, language: 'javascript', reset: true, timeout_seconds: 2.5 }), true);
});
