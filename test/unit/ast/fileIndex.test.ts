import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mayMatch, needsOf, summarize } from '../../../runner/src/tools/ast/fileIndex';
import { languageById } from '../../../runner/src/tools/ast/languages';
import { parseFlat } from '../../../runner/src/tools/ast/treeCache';

test('a summary holds every identifier-like word of its file', async () => {
  const source = [
    'import os_path2 as _p',
    'x9 = 9abc + a9b - __dunder__ # comment_word µsigma café',
    's = "in_string" + f"{fmt_word}"',
    ...Array.from({ length: 300 }, (_, i) => `name_${i} = value${i * 7}`),
  ].join('\n');
  const summary = summarize(await parseFlat(source, languageById('python')), 'python');
  const words = new Set(source.match(/[A-Za-z_][A-Za-z0-9_]*/g));
  assert.ok(words.size > 600);
  for (const w of words) assert.ok(mayMatch(summary, needsOf([], [w])), `${w} is in the file`);
  const absent = Array.from({ length: 1000 }, (_, i) => `absent_word_${i}`);
  const falsePositives = absent.filter((w) => mayMatch(summary, needsOf([], [w]))).length;
  assert.ok(falsePositives < 50, `${falsePositives} of 1000 absent words pass the filter`);
});
