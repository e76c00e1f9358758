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

test('every run of the same tools shares one compiled validator, and each reads its own errors', () => {
  const tools = [
    { name: 'read', description: '', tier: 'read' as const, inputSchema: readSchema, parallelSafe: true },
    { name: 'write', description: '', tier: 'write' as const, inputSchema: writeSchema, parallelSafe: false },
  ];
  const a = new ArgumentValidator(tools);
  const b = new ArgumentValidator(structuredClone(tools));
  assert.deepEqual(a.check('write', { path: 'a.txt' }), ['missing required argument "content"']);
  assert.deepEqual(b.check('write', { path: 'a.txt', content: '' }), []);
  assert.deepEqual(a.check('read', { path: 'a', start_line: 'x' }), ['argument "start_line" must be integer']);
  // A schema that reuses an $id with other content still validates by its own rules.
  const v1 = { $id: 'https://tether.dev/test.json', type: 'object', required: ['x'] };
  const v2 = { $id: 'https://tether.dev/test.json', type: 'object', required: ['y'] };
  const one = new ArgumentValidator([
    { name: 't', description: '', tier: 'read', inputSchema: v1, parallelSafe: true },
  ]);
  const two = new ArgumentValidator([
    { name: 't', description: '', tier: 'read', inputSchema: v2, parallelSafe: true },
  ]);
  assert.deepEqual(one.check('t', { y: 1 }), ['missing required argument "x"']);
  assert.deepEqual(two.check('t', { x: 1 }), ['missing required argument "y"']);
});
