/**
 * ast_grep on large real code against `ast-grep run` in the same run. For each pattern, in a
 * fresh runner each time: the first query issued right after the files arrived (the runner is
 * told, as PutFiles tells it, and starts indexing in the background), the first query issued
 * 5 s after, and the first query with background indexing off (the cold baseline); then
 * repeated queries, and the runner's peak memory. Also pyright's first diagnostics with and
 * without the background indexing starting at the same moment. Corpora: Python's standard
 * library and the TypeScript sources under node_modules, copied to a temp dir once (so
 * .gitignore rules of this repo do not apply and both tools see the same files).
 *
 *   npm run bench:ast                             # Python's standard library, default cache budget
 *   AST_BENCH_QUICK=1 npm run bench:ast           # one pattern, one pyright pair (a loaded machine)
 *   AST_BENCH_CORPORA=python-stdlib,typescript node dist/bench/ast.js   # these corpora
 *   AST_BENCH_WORKERS=0 node ...                  # ours without worker threads
 *   AST_BENCH_CACHE_MB=1024 node ...              # another budget (results go to ast-cache1024.json)
 *   AST_BENCH_PYRIGHT_HOLD=0 node ...             # pyright's start not told to the run: the index is not held
 *   AST_BENCH_PYRIGHT_PAIRS=10 node ...           # pyright starts without/with indexing, alternately (default 6 pairs)
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { cgroupCpuLimit, usableCores } from '../runner/src/util/cores';
import { summary, writeResult } from './lib';

const REPO = path.resolve(__dirname, '../..');
const AST_GREP = path.join(REPO, 'node_modules/.bin/ast-grep');
const ROOT = path.join(os.tmpdir(), 'tether-bench-ast');
const REPEATS = 5;
const DEFAULT_CACHE_MB = 256;
/** How long after the files arrived the "5 s" first query is issued. */
const ARRIVAL_DELAY_MS = 5000;
const PYRIGHT = 'pyright@1.1.414';

interface Corpus {
  name: string;
  language: string;
  dir: string;
  patterns: string[];
}

function copyTree(from: string, to: string, findArgs: string[]): void {
  mkdirSync(to, { recursive: true });
  execFileSync('bash', [
    '-c',
    `cd "$0" && find . ${findArgs.join(' ')} -print0 | tar --null -T - -cf - | tar -C "$1" -xf -`,
    from,
    to,
  ]);
}

function corpora(): Corpus[] {
  const stdlib = execFileSync('python3', ['-c', 'import sysconfig;print(sysconfig.get_paths()["stdlib"])'], {
    encoding: 'utf8',
  }).trim();
  const py = path.join(ROOT, 'python-stdlib');
  if (!existsSync(py)) copyTree(stdlib, py, ['-name', "'*.py'", '-not', '-path', "'./site-packages/*'"]);
  const ts = path.join(ROOT, 'typescript');
  if (!existsSync(ts)) {
    copyTree(path.join(REPO, 'node_modules'), path.join(ts, 'tmp'), ['-name', "'*.ts'", '-size', '-2M']);
    renameSync(path.join(ts, 'tmp'), path.join(ts, 'pkgs'));
  }
  return [
    {
      name: 'python-stdlib',
      language: 'python',
      dir: py,
      patterns: ['isinstance($A, $B)', '$A == $A', 'raise $E($$$A) from $C'],
    },
    {
      name: 'typescript',
      language: 'typescript',
      dir: ts,
      patterns: ['interface $I { $$$B }', 'export declare function $F($$$P): $R;', 'console.log($$$A)'],
    },
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

/** One `ast-grep run`, timed, with its peak RSS and CPU time (user + system) from /usr/bin/time. */
function astGrep(c: Corpus, pattern: string): { ms: number; cpuMs: number; peakMB: number; matches: number } {
  const t = process.hrtime.bigint();
  const r = spawnSync(
    '/usr/bin/time',
    ['-f', '%M %U %S', AST_GREP, 'run', '--pattern', pattern, '--lang', c.language, '--json=compact', '.'],
    {
      cwd: c.dir,
      encoding: 'utf8',
      maxBuffer: 1 << 30,
    },
  );
  const ms = Number(process.hrtime.bigint() - t) / 1e6;
  const [peakKB, user, sys] = r.stderr.trim().split('\n').pop()!.split(' ').map(Number);
  return {
    ms,
    cpuMs: Math.round((user + sys) * 1000),
    peakMB: Math.round(peakKB / 1024),
    matches: (JSON.parse(r.stdout || '[]') as unknown[]).length,
  };
}

interface OursResult {
  firstMs: number;
  /** CPU time of the whole runner process (all threads) during the first query. */
  firstCpuMs: number;
  /** CPU time the background index spent between the arrival and the first query. */
  cpuBeforeQueryMs: number;
  /** Files the background pass had indexed when the first query was issued. */
  indexedAtQuery: number;
  repeatedMs?: ReturnType<typeof summary>;
  peakMB: number;
  matches: number;
}

/** Our side, in a fresh process per measurement so the first query is really first. */
function ours(
  c: Corpus,
  pattern: string,
  workers: number,
  cacheMB: number,
  delayMs: number,
  index: boolean,
  repeats: number,
): OursResult {
  const args = [
    __filename,
    '--child',
    c.dir,
    c.language,
    pattern,
    String(workers),
    String(cacheMB),
    String(delayMs),
    index ? '1' : '0',
    String(repeats),
  ];
  const out = execFileSync(process.execPath, args, { encoding: 'utf8', maxBuffer: 1 << 26 });
  return JSON.parse(out.trim().split('\n').pop()!);
}

async function astRun(dir: string, workers: number, cacheMB: number, index: boolean) {
  const { RunContext } = await import('../runner/src/run');
  const { ToolRegistry } = await import('../runner/src/registry');
  const { registerAst } = await import('../runner/src/tools/ast');
  const { runnerContext, NO_FEATURES } = await import('../test/helpers/runner');
  // Only the ast family, as a runner with feature `ast` has it.
  const run = new RunContext({
    runId: 'bench',
    conversationId: 'bench',
    workspace: dir,
    features: { ...NO_FEATURES, ast: true },
    settings: { ast: { workers, cacheMB } },
  });
  const registry = new ToolRegistry();
  const family = registerAst(registry, run, { indexOnArrival: index })!;
  const call = (tool: string, args: unknown) => registry.call(tool, args, runnerContext());
  return { run, family, call };
}

async function child(
  dir: string,
  language: string,
  pattern: string,
  workers: number,
  cacheMB: number,
  delayMs: number,
  index: boolean,
  repeats: number,
): Promise<void> {
  const { run, family, call } = await astRun(dir, workers, cacheMB, index);
  const query = async () => {
    const t = process.hrtime.bigint();
    const r = await call('ast_grep', { pattern, language, max_results: 50 });
    if (r.isError) throw new Error(JSON.stringify(r.content));
    return { ms: Number(process.hrtime.bigint() - t) / 1e6, total: (r.structured as { total: number }).total };
  };
  const cpuMs = (since: NodeJS.CpuUsage) => {
    const u = process.cpuUsage(since);
    return Math.round((u.user + u.system) / 1000);
  };
  // The files just arrived: the runner is told as the gateway tells it after PutFiles.
  const arrived = process.cpuUsage();
  await run.command({ family: 'workspace', command: 'filesArrived', payload: { path: '.' } });
  await new Promise((r) => setTimeout(r, delayMs));
  const indexedAtQuery = family.indexer?.indexed ?? 0;
  const cpuBeforeQueryMs = cpuMs(arrived);
  const issued = process.cpuUsage();
  const first = await query();
  const firstCpuMs = cpuMs(issued);
  const repeated: number[] = [];
  for (let i = 0; i < repeats; i++) repeated.push((await query()).ms);
  const peakMB = Math.round(process.resourceUsage().maxRSS / 1024);
  const result: OursResult = {
    firstMs: Math.round(first.ms),
    firstCpuMs,
    cpuBeforeQueryMs,
    indexedAtQuery,
    repeatedMs: repeats ? summary(repeated) : undefined,
    peakMB,
    matches: first.total,
  };
  console.log(JSON.stringify(result));
  process.exit(0);
}

/** pyright-langserver from the registry (the version the runner image ships), installed once. */
function pyrightServer(): string {
  const prefix = path.join(ROOT, 'pyright');
  const js = path.join(prefix, 'node_modules/pyright/langserver.index.js');
  if (!existsSync(js))
    execFileSync('npm', ['install', '--no-save', '--no-fund', '--no-audit', '--prefix', prefix, PYRIGHT], {
      stdio: 'ignore',
    });
  return js;
}

/** Milliseconds from spawning pyright on `dir` to its first diagnostics for `file`. */
function pyrightFirstDiagnostics(server: string, dir: string, file: string): Promise<number> {
  const t0 = process.hrtime.bigint();
  const p = spawn(process.execPath, [server, '--stdio'], { cwd: dir, stdio: ['pipe', 'pipe', 'ignore'] });
  const send = (msg: unknown) => {
    const body = JSON.stringify({ jsonrpc: '2.0', ...(msg as object) });
    p.stdin.write(`Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  };
  const uri = `file://${path.join(dir, file)}`;
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const timer = setTimeout(() => reject(new Error('pyright gave no diagnostics in 300 s')), 300_000);
    p.stdout.on('data', (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      for (;;) {
        const head = buf.indexOf('\r\n\r\n');
        if (head < 0) return;
        const len = Number(/Content-Length: (\d+)/i.exec(buf.subarray(0, head).toString())?.[1]);
        if (buf.length < head + 4 + len) return;
        const msg = JSON.parse(buf.subarray(head + 4, head + 4 + len).toString());
        buf = buf.subarray(head + 4 + len);
        if (msg.id === 1 && msg.result) {
          send({ method: 'initialized', params: {} });
          send({
            method: 'textDocument/didOpen',
            params: {
              textDocument: { uri, languageId: 'python', version: 1, text: readFileSync(path.join(dir, file), 'utf8') },
            },
          });
        } else if (msg.method === 'workspace/configuration') {
          send({ id: msg.id, result: (msg.params.items as unknown[]).map(() => null) });
        } else if (msg.id !== undefined && msg.method) {
          send({ id: msg.id, result: null });
        } else if (msg.method === 'textDocument/publishDiagnostics' && msg.params.uri === uri) {
          clearTimeout(timer);
          p.kill();
          resolve(Number(process.hrtime.bigint() - t0) / 1e6);
        }
      }
    });
    send({
      id: 1,
      method: 'initialize',
      params: {
        processId: process.pid,
        rootUri: `file://${dir}`,
        capabilities: {},
        workspaceFolders: [{ uri: `file://${dir}`, name: 'bench' }],
      },
    });
  });
}

/** CPU ms each thread of this process used so far, with its nice value (Linux: /proc/self/task). */
function threadCpu(): Map<string, { nice: number; ms: number }> {
  const out = new Map<string, { nice: number; ms: number }>();
  const dir = '/proc/self/task';
  if (!existsSync(dir)) return out;
  for (const tid of readdirSync(dir)) {
    try {
      // Fields after the command (which may hold spaces): state is field 3, utime 14, stime 15, nice 19.
      const f = readFileSync(`${dir}/${tid}/stat`, 'utf8').split(')').pop()!.trim().split(' ');
      out.set(tid, { nice: Number(f[16]), ms: ((Number(f[11]) + Number(f[12])) * 1000) / 100 });
    } catch {
      // the thread ended meanwhile
    }
  }
  return out;
}

/** CPU ms used between two snapshots, by threads at normal priority and at nice 19. */
function cpuSince(before: ReturnType<typeof threadCpu>): { normalMs: number; nice19Ms: number } {
  let normalMs = 0;
  let nice19Ms = 0;
  for (const [tid, t] of threadCpu()) {
    const ms = t.ms - (before.get(tid)?.ms ?? 0);
    if (t.nice >= 19) nice19Ms += ms;
    else normalMs += ms;
  }
  return { normalMs: Math.round(normalMs), nice19Ms: Math.round(nice19Ms) };
}

/** In a fresh process: pyright starts as the files arrive, with or without our background indexing. */
async function pyrightChild(
  dir: string,
  file: string,
  workers: number,
  cacheMB: number,
  index: boolean,
): Promise<void> {
  const server = pyrightServer();
  const { run, family } = await astRun(dir, workers, cacheMB, index);
  const cpuBefore = threadCpu();
  await run.command({ family: 'workspace', command: 'filesArrived', payload: { path: '.' } });
  // The run is told of the start as the lsp family tells it: from the spawn to the first
  // diagnostics (AST_BENCH_PYRIGHT_HOLD=0: not told, to see what indexing alone costs it).
  const startup = process.env.AST_BENCH_PYRIGHT_HOLD === '0' ? { end: () => undefined } : run.startups.begin('pyright');
  const ms = await pyrightFirstDiagnostics(server, dir, file);
  startup.end('diagnostics');
  const hold = run.startups.history[0] as { how?: string } | undefined;
  console.log(
    JSON.stringify({
      ms: Math.round(ms),
      indexedMeanwhile: family.indexer?.indexed ?? 0,
      holdEnded: hold?.how ?? null,
      // This process's CPU meanwhile (clock ticks of 10 ms), at normal priority and at nice 19.
      ...cpuSince(cpuBefore),
    }),
  );
  process.exit(0);
}

async function main(): Promise<void> {
  const workers = Number(process.env.AST_BENCH_WORKERS ?? Math.min(4, usableCores()));
  const cacheMB = Number(process.env.AST_BENCH_CACHE_MB ?? DEFAULT_CACHE_MB);
  const only = (process.env.AST_BENCH_CORPORA ?? 'python-stdlib').split(',');
  const quick = process.env.AST_BENCH_QUICK === '1';
  const results: Record<string, unknown> = {
    quick,
    workers,
    cpus: os.availableParallelism(),
    cgroupCpuLimit: cgroupCpuLimit() ?? null,
    cacheMB,
    repeats: REPEATS,
    arrivalDelayMs: ARRIVAL_DELAY_MS,
    note: 'ast-grep is run twice per pattern: its first run is the baseline for our first queries, its second for our repeats. Ours: a fresh runner per measurement, told that the files arrived (as after PutFiles); first query issued at once (firstAt0) or 5 s later (firstAt5, then the repeats), and with background indexing off (firstNoIndex).',
    loadAverageBefore: os.loadavg(),
  };
  for (const c of corpora().filter((c) => only.includes(c.name))) {
    const size = countFiles(c.dir, c.language === 'python' ? '.py' : '.ts');
    const rows = [];
    for (const pattern of quick ? c.patterns.slice(0, 1) : c.patterns) {
      const theirsFirst = astGrep(c, pattern);
      const theirsAgain = astGrep(c, pattern);
      const at0 = ours(c, pattern, workers, cacheMB, 0, true, 0);
      const at5 = ours(c, pattern, workers, cacheMB, ARRIVAL_DELAY_MS, true, REPEATS);
      const cold = ours(c, pattern, workers, cacheMB, 0, false, 0);
      rows.push({
        pattern,
        astGrep: {
          firstMs: Math.round(theirsFirst.ms),
          secondMs: Math.round(theirsAgain.ms),
          cpuMs: theirsFirst.cpuMs,
          peakMB: Math.max(theirsFirst.peakMB, theirsAgain.peakMB),
          matches: theirsFirst.matches,
        },
        tether: { firstAt0: at0, firstAt5: at5, firstNoIndex: cold },
        firstAt0Speedup: +(theirsFirst.ms / at0.firstMs).toFixed(2),
        // CPU time is what a loaded machine distorts least: first query (at 5 s) against ast-grep's run.
        firstAt5CpuRatio: +(at5.firstCpuMs / theirsFirst.cpuMs).toFixed(2),
        coldCpuRatio: +(cold.firstCpuMs / theirsFirst.cpuMs).toFixed(2),
        firstAt5Speedup: +(theirsFirst.ms / at5.firstMs).toFixed(2),
        repeatedSpeedup: +(theirsAgain.ms / at5.repeatedMs!.p50).toFixed(2),
      });
      console.error(
        `${c.name} ${pattern}: ast-grep ${Math.round(theirsFirst.ms)}/${Math.round(theirsAgain.ms)} ms (cpu ${theirsFirst.cpuMs} ms); tether cpu at 5 s ${at5.firstCpuMs} ms, cold ${cold.firstCpuMs} ms; tether first at 0 s ${at0.firstMs} ms, at 5 s ${at5.firstMs} ms (${at5.indexedAtQuery} files indexed), no index ${cold.firstMs} ms; repeated p50 ${at5.repeatedMs!.p50} ms; peak ${at5.peakMB} MB vs ${theirsFirst.peakMB} MB; matches ${at5.matches}/${at0.matches}/${cold.matches} vs ${theirsFirst.matches}`,
      );
    }
    results[c.name] = { files: size.files, megabytes: +(size.bytes / 2 ** 20).toFixed(1), rows };
    if (c.language === 'python') {
      // pyright starting as the files arrive, alternately without and with our indexing.
      const runs: { index: boolean; ms: number; indexedMeanwhile: number }[] = [];
      const pairs = quick ? 1 : Number(process.env.AST_BENCH_PYRIGHT_PAIRS ?? 6);
      for (const index of Array.from({ length: pairs * 2 }, (_, i) => i % 2 === 1)) {
        const out = execFileSync(
          process.execPath,
          [__filename, '--pyright', c.dir, 'json/decoder.py', String(workers), String(cacheMB), index ? '1' : '0'],
          { encoding: 'utf8' },
        );
        runs.push({ index, ...JSON.parse(out.trim().split('\n').pop()!) });
        console.error(
          `pyright first diagnostics ${index ? 'with' : 'without'} indexing: ${runs[runs.length - 1].ms} ms`,
        );
      }
      const median = (index: boolean) => {
        const ms = runs.filter((r) => r.index === index).map((r) => r.ms);
        return ms.sort((a, b) => a - b)[Math.floor(ms.length / 2)];
      };
      const medians = { without: median(false), with: median(true) };
      console.error(
        `pyright first diagnostics, median of ${pairs}: ${medians.without} ms without, ${medians.with} ms with indexing`,
      );
      results[`${c.name}-pyright`] = { server: PYRIGHT, file: 'json/decoder.py', runs, medians };
    }
  }
  results.loadAverage = os.loadavg();
  writeResult(cacheMB === DEFAULT_CACHE_MB ? 'ast' : `ast-cache${cacheMB}`, results);
}

const fail = (err: unknown) => {
  console.error(err);
  process.exit(1);
};
const argv = process.argv;
if (argv[2] === '--child') {
  child(
    argv[3],
    argv[4],
    argv[5],
    Number(argv[6]),
    Number(argv[7]),
    Number(argv[8]),
    argv[9] === '1',
    Number(argv[10]),
  ).catch(fail);
} else if (argv[2] === '--pyright') {
  pyrightChild(argv[3], argv[4], Number(argv[5]), Number(argv[6]), argv[7] === '1').catch(fail);
} else {
  main().catch(fail);
}
