/**
 * ast_grep on large real code against `ast-grep run` in the same run: time of the first
 * query (fresh runner: grammar load, reading and parsing) and of repeated queries (tree
 * cache), and peak memory of each. Corpora: Python's standard library and the TypeScript
 * sources under node_modules, copied to a temp dir once (so .gitignore rules of this repo
 * do not apply and both tools see the same files).
 *
 *   node dist/bench/ast.js            # all corpora, default settings (cache 512 MB)
 *   AST_BENCH_WORKERS=0 node ...      # ours without worker threads
 *   AST_BENCH_CACHE_MB=1024 node ...  # a larger tree cache (results go to ast-cache1024.json)
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { summary, writeResult } from './lib';

const REPO = path.resolve(__dirname, '../..');
const AST_GREP = path.join(REPO, 'node_modules/.bin/ast-grep');
const ROOT = path.join(os.tmpdir(), 'tether-bench-ast');
const REPEATS = 5;

interface Corpus {
  name: string;
  language: string;
  dir: string;
  patterns: string[];
}

function copyTree(from: string, to: string, findArgs: string[]): void {
  mkdirSync(to, { recursive: true });
  execFileSync('bash', ['-c', `cd "$0" && find . ${findArgs.join(' ')} -print0 | tar --null -T - -cf - | tar -C "$1" -xf -`, from, to]);
}

function corpora(): Corpus[] {
  const stdlib = execFileSync('python3', ['-c', 'import sysconfig;print(sysconfig.get_paths()["stdlib"])'], { encoding: 'utf8' }).trim();
  const py = path.join(ROOT, 'python-stdlib');
  if (!existsSync(py)) copyTree(stdlib, py, ['-name', "'*.py'", '-not', '-path', "'./site-packages/*'"]);
  const ts = path.join(ROOT, 'typescript');
  if (!existsSync(ts)) {
    copyTree(path.join(REPO, 'node_modules'), path.join(ts, 'tmp'), ['-name', "'*.ts'", '-size', '-2M']);
    renameSync(path.join(ts, 'tmp'), path.join(ts, 'pkgs'));
  }
  return [
    { name: 'python-stdlib', language: 'python', dir: py, patterns: ['isinstance($A, $B)', '$A == $A', 'raise $E($$$A) from $C'] },
    { name: 'typescript', language: 'typescript', dir: ts, patterns: ['interface $I { $$$B }', 'export declare function $F($$$P): $R;', 'console.log($$$A)'] },
  ];
}

function countFiles(dir: string, ext: string): { files: number; bytes: number } {
  let files = 0;
  let bytes = 0;
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith(ext)) {
        files++;
        bytes += readFileSync(p).length; // also warms the page cache for both tools
      }
    }
  };
  walk(dir);
  return { files, bytes };
}

/** One `ast-grep run`, timed, with its peak RSS from /usr/bin/time. */
function astGrep(c: Corpus, pattern: string): { ms: number; peakMB: number; matches: number } {
  const t = process.hrtime.bigint();
  const r = spawnSync('/usr/bin/time', ['-f', '%M', AST_GREP, 'run', '--pattern', pattern, '--lang', c.language, '--json=compact', '.'], {
    cwd: c.dir,
    encoding: 'utf8',
    maxBuffer: 1 << 30,
  });
  const ms = Number(process.hrtime.bigint() - t) / 1e6;
  const peakKB = Number(r.stderr.trim().split('\n').pop());
  return { ms, peakMB: Math.round(peakKB / 1024), matches: (JSON.parse(r.stdout || '[]') as unknown[]).length };
}

/** Our side, in a fresh process per pattern so the first query is really first. */
function ours(c: Corpus, pattern: string, workers: number, cacheMB: number): { firstMs: number; repeatedMs: ReturnType<typeof summary>; peakMB: number; matches: number } {
  const out = execFileSync(process.execPath, [__filename, '--child', c.dir, c.language, pattern, String(workers), String(cacheMB)], { encoding: 'utf8', maxBuffer: 1 << 26 });
  return JSON.parse(out.trim().split('\n').pop()!);
}

async function child(dir: string, language: string, pattern: string, workers: number, cacheMB: number): Promise<void> {
  const { RunContext } = await import('../runner/src/run');
  const { ToolRegistry } = await import('../runner/src/registry');
  const { registerAst } = await import('../runner/src/tools/ast');
  const { runnerContext, NO_FEATURES } = await import('../test/helpers/runner');
  // Only the ast family, as a runner with feature `ast` has it.
  const run = new RunContext({ runId: 'bench', conversationId: 'bench', workspace: dir, features: { ...NO_FEATURES, ast: true }, settings: { ast: { workers, cacheMB } } });
  const registry = new ToolRegistry();
  registerAst(registry, run);
  const call = (tool: string, args: unknown) => registry.call(tool, args, runnerContext());
  const query = async () => {
    const t = process.hrtime.bigint();
    const r = await call('ast_grep', { pattern, language, max_results: 50 });
    if (r.isError) throw new Error(JSON.stringify(r.content));
    return { ms: Number(process.hrtime.bigint() - t) / 1e6, total: (r.structured as { total: number }).total };
  };
  const first = await query();
  const repeated: number[] = [];
  for (let i = 0; i < REPEATS; i++) repeated.push((await query()).ms);
  const peakMB = Math.round(process.resourceUsage().maxRSS / 1024);
  console.log(JSON.stringify({ firstMs: Math.round(first.ms), repeatedMs: summary(repeated), peakMB, matches: first.total }));
  process.exit(0);
}

async function main(): Promise<void> {
  const workers = Number(process.env.AST_BENCH_WORKERS ?? Math.max(1, Math.min(4, os.availableParallelism())));
  const cacheMB = Number(process.env.AST_BENCH_CACHE_MB ?? 512);
  const results: Record<string, unknown> = { workers, cacheMB, repeats: REPEATS, note: 'ast-grep is run twice per pattern; its second run is the baseline for our repeated query' };
  for (const c of corpora()) {
    const size = countFiles(c.dir, c.language === 'python' ? '.py' : '.ts');
    const rows = [];
    for (const pattern of c.patterns) {
      const theirsFirst = astGrep(c, pattern);
      const theirsAgain = astGrep(c, pattern);
      const mine = ours(c, pattern, workers, cacheMB);
      rows.push({
        pattern,
        astGrep: { firstMs: Math.round(theirsFirst.ms), secondMs: Math.round(theirsAgain.ms), peakMB: Math.max(theirsFirst.peakMB, theirsAgain.peakMB), matches: theirsFirst.matches },
        tether: mine,
        firstSpeedup: +(theirsFirst.ms / mine.firstMs).toFixed(2),
        repeatedSpeedup: +(theirsAgain.ms / mine.repeatedMs.p50).toFixed(2),
      });
      console.error(`${c.name} ${pattern}: ast-grep ${Math.round(theirsFirst.ms)}/${Math.round(theirsAgain.ms)} ms, tether first ${mine.firstMs} ms, repeated p50 ${mine.repeatedMs.p50} ms, peak ${mine.peakMB} MB vs ${theirsFirst.peakMB} MB, matches ${mine.matches} vs ${theirsFirst.matches}`);
    }
    results[c.name] = { files: size.files, megabytes: +(size.bytes / 2 ** 20).toFixed(1), rows };
  }
  results.loadAverage = os.loadavg();
  writeResult(cacheMB === 512 ? 'ast' : `ast-cache${cacheMB}`, results);
}

if (process.argv[2] === '--child') {
  child(process.argv[3], process.argv[4], process.argv[5], Number(process.argv[6]), Number(process.argv[7])).catch((err) => {
    console.error(err);
    process.exit(1);
  });
} else {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
