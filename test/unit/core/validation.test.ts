import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ArgumentValidator, parseArguments } from '../../../gateway/src/validation';
import { readSchema, writeSchema } from '../../../runner/src/tools/files/schemas';

const v = new ArgumentValidator([
  { name: 'read', description: '', tier: 'read', inputSchema: readSchema, parallelSafe: true },
  { name: 'write', description: '', tier: 'write', inputSchema: writeSchema, parallelSafe: false },
]);

test('valid arguments pass', () => {
  assert.deepEqual(v.check('read', { path: 'a.txt', start_line: 2 }), []);
});

test('a missing required argument is named', () => {
  assert.deepEqual(v.check('write', { path: 'a.txt' }), ['missing required argument "content"']);
});

test('a string where a number belongs is named with the expected type', () => {
  assert.deepEqual(v.check('read', { path: 'a', start_line: 'three' }), ['argument "start_line" must be integer']);
});

test('every bad field is reported, not just the first', () => {
  const problems = v.check('read', { path: 7, start_line: 0, bogus: true });
  assert.equal(problems.length, 3, problems.join('; '));
  assert.ok(problems.some((p) => p.includes('unknown argument "bogus"')));
  assert.ok(problems.some((p) => p.includes('"path" must be string')));
  assert.ok(problems.some((p) => p.includes('"start_line" must be >= 1')));
});

test('arguments_json: empty means {}, malformed JSON and non-objects are refused', () => {
  assert.deepEqual(parseArguments(''), { ok: true, value: {} });
  const bad = parseArguments('{"path": ');
  assert.equal(bad.ok, false);
  assert.match((bad as { error: string }).error, /not valid JSON/);
  assert.equal(parseArguments('[1,2]').ok, false);
  assert.equal(parseArguments('null').ok, false);
  assert.equal(parseArguments('"x"').ok, false);
});
