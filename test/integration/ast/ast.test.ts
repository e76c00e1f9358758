import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { Approval } from '@tether/contract';
import { resultText } from '../../../clients/typescript/src';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';

/**
 * ast_grep, ast_edit and resolve through gRPC → gateway → runner (in the runner image with
 * TETHER_TEST_PROVIDER=docker: the grammars' wasm files must be in it). One run for all cases.
 */
let t: TestGateway;
let runId: string;

const WIDGET = readFileSync(path.resolve(__dirname, '../../../../test/fixtures/ast/dart/widget.dart'), 'utf8');
const MODULE = 'def load(path):\n    data = old_api(path, 1)\n    return data\n';

before(async () => {
  t = await startTestGateway();
  const run = await t.alice.createRun({ features: { ast: true }, approvals: { write: Approval.AUTO } });
  assert.equal(run.error, '');
  runId = run.runId;
  await t.alice.putFileMap(runId, {
    'lib/a.dart': WIDGET,
    'lib/b.dart': WIDGET,
    'py/m1.py': MODULE,
    'py/m2.py': MODULE,
  });
});

after(async () => {
  if (runId) await t.alice.deleteRun(runId).catch(() => undefined);
  await t?.close();
});

async function call(tool: string, args: Record<string, unknown>) {
  const { result } = await t.alice.callTool(runId, tool, args);
  return { isError: result.isError, text: resultText(result), structured: JSON.parse(result.structuredJson || '{}') };
}

test('ast_grep finds the guard that disposes what it checked (Dart)', async () => {
  const r = await call('ast_grep', { pattern: 'if ($X != null) $X.dispose()', language: 'dart' });
  assert.equal(r.isError, false, r.text);
  assert.equal(r.structured.total, 2);
  assert.deepEqual(
    r.structured.matches.map((m: { file: string; start_line: number }) => `${m.file}:${m.start_line}`),
    ['lib/a.dart:10', 'lib/b.dart:10'],
  );
});

test('ast_edit stages, resolve accept writes every file', async () => {
  const r = await call('ast_edit', { pattern: 'dispose($X)', rewrite: '$X.dispose()', language: 'dart' });
  assert.equal(r.isError, false, r.text);
  assert.match(r.text, /^\(proposed\) 6 replacements in 2 files/);
  const ok = await call('resolve', { edit_id: r.structured.edit_id, action: 'accept' });
  assert.equal(ok.isError, false, ok.text);
  const after = await call('ast_grep', { pattern: '$X.dispose()', language: 'dart', path: 'lib/a.dart' });
  assert.deepEqual(
    after.structured.matches.map((m: { captures: { X: string } }) => m.captures.X),
    ['main', 'main', 'other', 'c', 'main'],
  );
});

test('resolve accept writes nothing when a file changed after staging', async () => {
  const r = await call('ast_edit', { pattern: 'old_api($A, $B)', rewrite: 'new_api($B, $A)', path: 'py' });
  assert.equal(r.isError, false, r.text);
  const w = await call('write', { path: 'py/m2.py', content: `${MODULE}# edited meanwhile\n` });
  assert.equal(w.isError, false, w.text);
  const refused = await call('resolve', { edit_id: r.structured.edit_id, action: 'accept' });
  assert.equal(refused.isError, true);
  assert.match(refused.text, /nothing was written.*py\/m2\.py/);
  const still = await call('ast_grep', { pattern: 'old_api($A, $B)', language: 'python' });
  assert.equal(still.structured.total, 2, 'both files keep the old call');
  const again = await call('resolve', { edit_id: r.structured.edit_id, action: 'accept' });
  assert.match(again.text, /already resolved/);
});

test('bad input is a tool error, not a transport error', async () => {
  const unknown = await call('ast_grep', { pattern: 'f($A)', language: 'klingon' });
  assert.equal(unknown.isError, true);
  assert.match(unknown.text, /unknown language "klingon"; supported: .*dart/);
  const broken = await call('ast_grep', { pattern: 'def (:', language: 'python' });
  assert.match(broken.text, /does not parse as python/);
});
