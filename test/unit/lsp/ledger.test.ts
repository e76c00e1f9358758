import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Diagnostic } from 'vscode-languageserver-protocol';
import { DiagnosticsLedger } from '../../../runner/src/tools/lsp/ledger';

const d = (line: number, message: string, code: string | number = 2322, severity: 1 | 2 = 1): Diagnostic => ({
  range: { start: { line, character: 0 }, end: { line, character: 1 } },
  message,
  code,
  severity,
});

test('reported once; a moved diagnostic is not news; a new one is', () => {
  const l = new DiagnosticsLedger();
  assert.equal(l.admit('a.ts', [d(0, 'bad type')]).length, 1);
  assert.equal(l.admit('a.ts', [d(0, 'bad type')]).length, 0);
  assert.equal(l.admit('a.ts', [d(4, 'bad type')]).length, 0, 'moved four lines down');
  assert.deepEqual(
    l.admit('a.ts', [d(4, 'bad type'), d(5, 'other')]).map((x) => x.message),
    ['other'],
  );
});

test('the key is (severity, code, message) per file; duplicates in one batch are one report', () => {
  const l = new DiagnosticsLedger();
  assert.equal(l.admit('a.ts', [d(0, 'x'), d(1, 'x')]).length, 1);
  assert.equal(l.admit('a.ts', [d(0, 'x', 2322, 2)]).length, 1, 'a warning is not the same as an error');
  assert.equal(l.admit('a.ts', [d(0, 'x', 2322, 2), d(0, 'x', 9999, 2)]).length, 1, 'another code is another problem');
  assert.equal(l.admit('b.ts', [d(0, 'x', 2322, 2)]).length, 1, 'the same message in another file is news');
});

test('fixed and later re-introduced is reported again', () => {
  const l = new DiagnosticsLedger();
  l.admit('a.ts', [d(0, 'x')]);
  assert.equal(l.admit('a.ts', []).length, 0);
  assert.equal(l.admit('a.ts', [d(0, 'x')]).length, 1);
});
