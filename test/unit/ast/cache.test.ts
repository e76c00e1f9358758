import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, statSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { TreeCache } from '../../../runner/src/tools/ast/treeCache';
import { languageById } from '../../../runner/src/tools/ast/languages';

test('the tree cache stays within its bound and evicts the least recently used', async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-ast-cache-'));
  const python = languageById('python');
  const limit = 200_000;
  const cache = new TreeCache(limit);
  const files = Array.from({ length: 20 }, (_, i) => {
    const abs = path.join(dir, `m${i}.py`);
    writeFileSync(abs, `def f${i}(x):\n    return x + ${i}\n`.repeat(40));
    return abs;
  });
  const visit = async (abs: string) => {
    const st = statSync(abs);
    const file = await cache.load(abs, st.mtimeMs, st.size);
    assert.equal(file.kind, 'text');
    if (file.kind === 'text') return cache.withTree(abs, file, python, (tree) => tree.rootNode.childCount);
  };
  // One search over more than fits: the first files are cached, the rest used and freed.
  cache.beginPass();
  for (const f of files) assert.equal(await visit(f), 40);
  assert.ok(cache.bytes <= limit, `estimate ${cache.bytes} above the limit`);
  const cached = cache.size;
  assert.ok(cached > 1 && cached < files.length, `${cached} of ${files.length} cached`);
  // The same search again finds what the first pass kept (no thrashing) and stays bounded.
  cache.beginPass();
  const misses = cache.misses;
  for (const f of files) await visit(f);
  assert.ok(cache.misses - misses <= files.length - cache.trees + 1, `re-read ${cache.misses - misses}`);
  assert.ok(cache.bytes <= limit);
  // A new search evicts what earlier searches used, least recently used first.
  cache.beginPass();
  const before = cache.misses;
  await visit(files[0]);
  assert.equal(cache.misses, before, 'a file kept by the last search is still cached');
  // A changed file (size differs) is read again.
  const m = cache.misses;
  writeFileSync(files[files.length - 1], 'x = 1\n');
  await visit(files[files.length - 1]).catch(() => undefined);
  assert.equal(cache.misses, m + 1);
  cache.clear();
  assert.equal(cache.bytes, 0);
});

test('every shipped grammar loads', async () => {
  const { LANGUAGE_IDS, loadLanguage } = await import('../../../runner/src/tools/ast/languages');
  for (const id of LANGUAGE_IDS) await loadLanguage(languageById(id));
  assert.ok(LANGUAGE_IDS.length >= 30);
});
