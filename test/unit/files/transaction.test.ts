import { test } from 'node:test';
import assert from 'node:assert/strict';
import { promises as fs, writeFileSync, chmodSync, readdirSync } from 'node:fs';
import * as path from 'node:path';
import { commitChanges } from '../../../runner/src/fileTransaction';
import { tempWorkspace } from '../../helpers/runner';

test('a file that changed since the edit was computed rejects the whole change', async () => {
  const dir = tempWorkspace();
  const a = path.join(dir, 'a'),
    b = path.join(dir, 'b');
  writeFileSync(a, 'A');
  writeFileSync(b, 'B-changed');
  await assert.rejects(
    commitChanges([
      { path: a, expected: 'A', next: 'A2' },
      { path: b, expected: 'B', next: 'B2' },
    ]),
    /nothing was written: 1 file\(s\) changed/,
  );
  assert.equal(await fs.readFile(a, 'utf8'), 'A');
});

test('a read-only target makes the whole change roll back', async () => {
  const dir = tempWorkspace();
  const a = path.join(dir, 'a'),
    b = path.join(dir, 'b'),
    c = path.join(dir, 'c');
  writeFileSync(a, 'A');
  writeFileSync(b, 'B');
  chmodSync(b, 0o444);
  await assert.rejects(
    commitChanges(
      [
        { path: a, expected: 'A', next: 'A2' },
        { path: c, expected: null, next: 'C' },
        { path: b, expected: 'B', next: 'B2' },
      ],
      (p) => path.basename(p),
    ),
    /nothing was written: b is read-only \(every file was restored\)/,
  );
  assert.equal(await fs.readFile(a, 'utf8'), 'A');
  assert.equal(await fs.readFile(b, 'utf8'), 'B');
  await assert.rejects(fs.access(c));
  assert.deepEqual(
    readdirSync(dir).filter((n) => n.endsWith('.tmp')),
    [],
  );
});
