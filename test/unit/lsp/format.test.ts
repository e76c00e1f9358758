import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, realpathSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { LocationFormatter, capped, foldRepeats } from '../../../runner/src/tools/lsp/format';

test('a cap that cuts says so: "showing N of M"', () => {
  const many = Array.from({ length: 312 }, (_, i) => `l${i}`);
  assert.deepEqual(capped(many, 50, 'references'), { lines: many.slice(0, 50), note: 'showing 50 of 312 references' });
  assert.deepEqual(capped(many.slice(0, 3), 50, 'references'), { lines: many.slice(0, 3), note: '3 references' });
});

test('locations: workspace-relative, 1-based, with the source line; sorted; uses on one line folded', async () => {
  const root = realpathSync(mkdtempSync(path.join(os.tmpdir(), 'lsp-format-')));
  writeFileSync(path.join(root, 'b.ts'), 'first\n  f(x) + f(y)\n');
  writeFileSync(path.join(root, 'a.ts'), 'only line\n');
  const uri = (f: string) => pathToFileURL(path.join(root, f)).href;
  const at = (f: string, line: number, character: number) => ({
    uri: uri(f),
    range: { start: { line, character }, end: { line, character: character + 1 } },
  });
  const fmt = new LocationFormatter(root);
  const lines = await fmt.locations([
    at('b.ts', 1, 9),
    at('a.ts', 0, 0),
    at('b.ts', 1, 2),
    at('b.ts', 1, 2),
    {
      uri: 'file:///nonexistent-tether/stdio.h',
      range: { start: { line: 0, character: 0 }, end: { line: 0, character: 0 } },
    },
  ]);
  assert.deepEqual(foldRepeats(lines), [
    '/nonexistent-tether/stdio.h:1',
    'a.ts:1: only line',
    'b.ts:2: f(x) + f(y)  (2 on this line)',
  ]);
});
