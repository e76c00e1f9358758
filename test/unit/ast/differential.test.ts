import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Workspace } from '../../../runner/src/workspace';
import { InProcessEngine } from '../../../runner/src/tools/ast/pool';
import { searchWorkspace } from '../../../runner/src/tools/ast/search';
import { CASES, type DiffCase } from './cases';

const REPO = path.resolve(__dirname, '../../../..');
const FIXTURES = path.join(REPO, 'test/fixtures/ast');
const AST_GREP = path.join(REPO, 'node_modules/.bin/ast-grep');

interface Span {
  file: string;
  start: number;
  end: number;
}
const key = (s: Span) => `${s.file}:${s.start}-${s.end}`;

function oracle(c: DiffCase, dir: string, rewrite?: string): Span[] {
  const args = ['run', '--pattern', c.pattern, '--lang', c.lang];
  args.push(...(rewrite === undefined ? ['--json=compact'] : ['--rewrite', rewrite, '--update-all']));
  let out: string;
  try {
    out = execFileSync(AST_GREP, [...args, '.'], { cwd: dir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    // ast-grep exits 1 when nothing matched.
    const e = err as { status?: number; stdout?: string };
    if (e.status !== 1) throw err;
    out = e.stdout ?? '';
  }
  if (rewrite !== undefined) return [];
  const parsed = JSON.parse(out || '[]') as { file: string; range: { byteOffset: { start: number; end: number } } }[];
  return parsed.map((m) => ({ file: m.file, start: m.range.byteOffset.start, end: m.range.byteOffset.end }));
}

async function ours(
  c: DiffCase,
  dir: string,
  rewrite?: string,
): Promise<{ spans: Span[]; rewritten: Map<string, string> }> {
  const spans: Span[] = [];
  const rewritten = new Map<string, string>();
  const engine = new InProcessEngine(64 * 2 ** 20);
  const found = await searchWorkspace(
    new Workspace(dir),
    engine,
    { pattern: c.pattern, language: c.lang, rewrite, limit: 1e6 },
    2 ** 21,
  );
  for (const f of found.files) {
    const source = readFileSync(f.abs, 'utf8');
    const byte = (i: number) => Buffer.byteLength(source.slice(0, i));
    assert.equal(f.matches.length, f.total);
    for (const m of f.matches) spans.push({ file: f.rel, start: byte(m.start), end: byte(m.end) });
    if (f.edit) rewritten.set(f.rel, f.edit.next);
  }
  await engine.close();
  return { spans, rewritten };
}

const summary = { patterns: 0, agreeing: 0, rewrites: 0, rewritesAgreeing: 0, languages: new Set<string>() };

for (const c of CASES) {
  test(`differential ${c.lang}: ${JSON.stringify(c.pattern)}${c.rewrite !== undefined ? ` → ${JSON.stringify(c.rewrite)}` : ''}`, async () => {
    const dir = path.join(FIXTURES, c.lang);
    summary.patterns++;
    summary.languages.add(c.lang);
    const expected = oracle(c, dir).map(key).sort();
    const actual = (await ours(c, dir)).spans.map(key).sort();
    if (c.none) assert.equal(expected.length, 0, 'a must-not-match case matched in ast-grep: fix the case');
    else assert.ok(expected.length > 0, 'the oracle found nothing: the case tests nothing');
    assert.deepEqual(actual, expected);
    summary.agreeing++;
    if (c.rewrite === undefined) return;
    summary.rewrites++;
    const copy = mkdtempSync(path.join(os.tmpdir(), 'tether-ast-diff-'));
    cpSync(dir, copy, { recursive: true });
    oracle(c, copy, c.rewrite);
    const mine = (await ours(c, dir, c.rewrite)).rewritten;
    for (const name of readdirSync(copy)) {
      const theirs = readFileSync(path.join(copy, name), 'utf8');
      const original = readFileSync(path.join(dir, name), 'utf8');
      assert.equal(mine.get(name) ?? original, theirs, `rewritten ${name} differs`);
    }
    summary.rewritesAgreeing++;
  });
}

test('differential summary', () => {
  console.log(
    `differential: ${summary.agreeing}/${summary.patterns} patterns agree with ast-grep over ${summary.languages.size} languages; rewrites ${summary.rewritesAgreeing}/${summary.rewrites}`,
  );
  assert.ok(summary.patterns >= 60 && summary.languages.size >= 5);
});
