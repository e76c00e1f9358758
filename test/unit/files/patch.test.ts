import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyHunks, parsePatch, PatchError } from '../../../runner/src/tools/files/patch';

test('parses add, update with move, and delete sections', () => {
  const ops = parsePatch(
    [
      '*** Begin Patch',
      '*** Add File: a.txt',
      '+one',
      '+two',
      '*** Update File: b.txt',
      '*** Move to: c.txt',
      '@@ def f():',
      '-    return 1',
      '+    return 2',
      '*** Delete File: d.txt',
      '*** End Patch',
    ].join('\n'),
  );
  assert.deepEqual(ops, [
    { kind: 'add', path: 'a.txt', content: 'one\ntwo\n' },
    {
      kind: 'update',
      path: 'b.txt',
      moveTo: 'c.txt',
      hunks: [{ anchor: 'def f():', oldLines: ['    return 1'], newLines: ['    return 2'], atEnd: false }],
    },
    { kind: 'delete', path: 'd.txt' },
  ]);
});

test('envelope errors are named', () => {
  assert.throws(() => parsePatch('*** Update File: a\n*** End Patch'), /must start with/);
  assert.throws(() => parsePatch('*** Begin Patch\n*** Update File: a\n@@\n-x'), /must end with/);
  assert.throws(() => parsePatch('*** Begin Patch\n*** End Patch'), /changes no file/);
  assert.throws(() => parsePatch('*** Begin Patch\n*** Add File: a\nno plus\n*** End Patch'), /must start with "\+"/);
  assert.throws(() => parsePatch('*** Begin Patch\ngarbage\n*** End Patch'), /expected a file header/);
  assert.throws(
    () => parsePatch('*** Begin Patch\n*** Update File: a\n@@\n?bad\n*** End Patch'),
    /must start with " ", "-" or "\+"/,
  );
});

test('hunks apply in order, anchored by their context', () => {
  const src = 'def a():\n    return 1\n\ndef b():\n    return 1\n';
  const [op] = parsePatch(
    '*** Begin Patch\n*** Update File: m.py\n@@ def b():\n-    return 1\n+    return 2\n*** End Patch',
  );
  assert.equal(op.kind, 'update');
  assert.equal(
    applyHunks(src, (op as unknown as { hunks: never }).hunks, 'm.py'),
    'def a():\n    return 1\n\ndef b():\n    return 2\n',
  );
});

test('a hunk tolerates trailing whitespace differences but not different text', () => {
  const [op] = parsePatch('*** Begin Patch\n*** Update File: x\n@@\n alpha\n-beta\n+BETA\n*** End Patch');
  const hunks = (op as unknown as { hunks: never }).hunks;
  assert.equal(applyHunks('alpha  \nbeta\n', hunks, 'x'), 'alpha\nBETA\n');
  assert.throws(
    () => applyHunks('alpha\ngamma\n', hunks, 'x'),
    (e: unknown) => e instanceof PatchError && /hunk 1 does not match/.test((e as Error).message),
  );
});

test('End of File anchors a hunk at the end', () => {
  const [op] = parsePatch('*** Begin Patch\n*** Update File: x\n@@\n x\n+tail\n*** End of File\n*** End Patch');
  assert.equal(applyHunks('x\ny\nx\n', (op as unknown as { hunks: never }).hunks, 'x'), 'x\ny\nx\ntail\n');
});
