import { test } from 'node:test';
import assert from 'node:assert/strict';
import Ajv from 'ajv';
import { ArgumentValidator } from '../../../gateway/src/validation';
import { askUserSchema } from '../../../runner/src/tools/ask/schemas';
import { editSchema as astEditSchema, grepSchema, resolveSchema } from '../../../runner/src/tools/ast/schemas';
import { debugSchema } from '../../../runner/src/tools/debug/schemas';
import { evalSchema } from '../../../runner/src/tools/eval/schemas';
import { applyPatchSchema, editSchema, readSchema, writeSchema } from '../../../runner/src/tools/files/schemas';
import { lspRenameSchema, lspSchema } from '../../../runner/src/tools/lsp/schemas';
import { killSchema, listSchema, sendSchema, spawnSchema, waitSchema } from '../../../runner/src/tools/vibe/schemas';

const schemas = {
  askUserSchema,
  astEditSchema,
  grepSchema,
  resolveSchema,
  debugSchema,
  evalSchema,
  applyPatchSchema,
  editSchema,
  readSchema,
  writeSchema,
  lspRenameSchema,
  lspSchema,
  killSchema,
  listSchema,
  sendSchema,
  spawnSchema,
  waitSchema,
};

test('tool schemas are plain JSON Schema: ajv (unknown keywords refused) compiles each, and JSON carries all of it', () => {
  const strict = new Ajv({ allErrors: true });
  for (const [name, schema] of Object.entries(schemas)) {
    // What crosses the JSON-RPC wire to the gateway is the JSON text; it must validate the same.
    const wire = JSON.parse(JSON.stringify(schema));
    assert.doesNotThrow(() => strict.compile(wire), name);
    assert.equal(wire.type, 'object', name);
    assert.equal(wire.additionalProperties, false, `${name} refuses unknown arguments`);
  }
});

// The wire form of a few schemas, validated the way the gateway does: enum lists stay `enum`
// (not TypeBox's anyOf of literals) and the per-op requirements ride along as allOf.
const v = new ArgumentValidator(
  Object.entries({ debugSchema, lspSchema, spawnSchema, resolveSchema, askUserSchema }).map(([name, s]) => ({
    name,
    description: '',
    tier: 'read' as const,
    inputSchema: JSON.parse(JSON.stringify(s)),
    parallelSafe: true,
  })),
);

test('enumerated arguments accept their values and name the allowed ones otherwise', () => {
  assert.deepEqual(v.check('spawnSchema', { brief: 'b', label: 'l', tier: 'good' }), []);
  assert.deepEqual(v.check('spawnSchema', { brief: 'b', label: 'l', tier: 'best' }), [
    'argument "tier" must be one of ["fast","good"]',
  ]);
  assert.deepEqual(v.check('resolveSchema', { edit_id: 'edit_3', action: 'accept' }), []);
  assert.deepEqual(v.check('resolveSchema', { edit_id: 'e3', action: 'keep' }), [
    'argument "edit_id" must match pattern "^edit_[0-9]+$"',
    'argument "action" must be one of ["accept","discard"]',
  ]);
});

test('per-op requirements still hold (debug, lsp)', () => {
  assert.deepEqual(v.check('debugSchema', { op: 'status' }), []);
  assert.deepEqual(v.check('debugSchema', { op: 'breakpoints', file: 'a.py', lines: [] }), []);
  assert.ok(v.check('debugSchema', { op: 'breakpoints', file: 'a.py' }).includes('missing required argument "lines"'));
  assert.ok(v.check('debugSchema', { op: 'launch' }).includes('missing required argument "program"'));
  assert.deepEqual(v.check('lspSchema', { action: 'status' }), []);
  const nav = v.check('lspSchema', { action: 'hover', file: 'a.ts' });
  assert.ok(
    nav.includes('missing required argument "line"') && nav.includes('missing required argument "symbol"'),
    nav.join('; '),
  );
  assert.ok(v.check('lspSchema', { action: 'diagnostics' }).includes('missing required argument "file"'));
});

test('nested objects and optional fields keep their bounds (ask_user)', () => {
  assert.deepEqual(
    v.check('askUserSchema', { question: 'Which?', options: [{ label: 'A' }, { label: 'B', description: 'b' }] }),
    [],
  );
  assert.deepEqual(v.check('askUserSchema', { question: 'Which?', options: [{ label: '' }] }), [
    'argument "options.0.label" must NOT have fewer than 1 characters',
  ]);
  assert.deepEqual(v.check('askUserSchema', { question: 'Which?', options: [{ label: 'A', why: 'x' }] }), [
    'unknown argument "why" in options.0',
  ]);
});
