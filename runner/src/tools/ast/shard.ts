import type { SyntaxNode as Node } from './flatTree';
import { ToolError } from '../../tool';
import { languageById } from './languages';
import { findAll, type Captures, type Match } from './matcher';
import { compilePattern, type CompiledPattern } from './pattern';
import { applyReplacements, RewriteTemplate, type Replacement } from './rewrite';
import { FlatTree } from './flatTree';
import type { IndexedFile } from './indexer';
import { mayMatch, needsOf, type Needs } from './fileIndex';
import type { PatternNode } from './pattern';
import { TreeCache, type CachedFile } from './treeCache';

const READ_AHEAD = 32;
/** Files between turns of the event loop, so a cancel message is seen. */
const YIELD_EVERY = 16;

/** One file of a job, as the walker saw it. */
export interface JobFile {
  abs: string;
  mtimeMs: number;
  size: number;
  language: string;
}

export interface ShardJob {
  pattern: string;
  /** With a rewrite, each file with matches also gets its rewritten content. */
  rewrite?: string;
  files: JobFile[];
  /** Most matches to describe in full (all are counted); a prefix of the job's files in order. */
  limit: number;
}

const MAX_MATCH_CHARS = 400;
const MAX_CAPTURE_CHARS = 200;

export function cut(text: string, max = MAX_MATCH_CHARS): string {
  return text.length <= max ? text : `${text.slice(0, max)}… (${text.length - max} more characters)`;
}

/** A match as plain data: it crosses threads, so no tree-sitter nodes. */
export interface PlainMatch {
  /** Offsets into the file's text (UTF-16 units, as JavaScript strings count). */
  start: number;
  end: number;
  startLine: number;
  endLine: number;
  text: string;
  captures: Record<string, string | string[]>;
}

export interface FileOutcome {
  abs: string;
  binary?: boolean;
  /** Skipped before parsing: the file lacks a word every match must contain. */
  prefiltered?: boolean;
  total: number;
  matches: PlainMatch[];
  edit?: { expected: string; next: string; applied: Replacement[] };
}

/** Node kinds every match contains: each pattern node but a metavariable meets its own kind. */
function kindsOf(node: PatternNode, into: number[] = []): number[] {
  if (node.kind !== 'metavar') into.push(node.typeId);
  if (node.kind === 'inner') node.children.forEach((c) => kindsOf(c, into));
  return into;
}

function plainCaptures(caps: Captures): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, node] of caps.single) out[name] = cut(node.text, MAX_CAPTURE_CHARS);
  for (const [name, nodes] of caps.multi)
    out[name] = nodes.filter((n: Node) => n.isNamed && !n.isExtra).map((n) => cut(n.text, MAX_CAPTURE_CHARS));
  return out;
}

function plain(m: Match, source: string): PlainMatch {
  const text = source.slice(m.start, m.end);
  const startLine = m.node.startPosition.row + 1;
  return {
    start: m.start,
    end: m.end,
    startLine,
    endLine: startLine + (text.match(/\n/g)?.length ?? 0),
    text: cut(text),
    captures: plainCaptures(m.captures),
  };
}

/**
 * A share of the search work with its own tree cache: it reads, parses and matches the files
 * it is given and answers in plain data. Runs on a worker thread (see pool.ts), or in process.
 */
export class Shard {
  readonly cache: TreeCache;
  private readonly patterns = new Map<string, Promise<CompiledPattern>>();
  private readonly needs = new WeakMap<CompiledPattern, Needs>();

  constructor(cacheBytes: number) {
    this.cache = new TreeCache(cacheBytes);
  }

  private compiled(pattern: string, language: string): Promise<CompiledPattern> {
    const key = `${language}\0${pattern}`;
    let p = this.patterns.get(key);
    if (!p) {
      if (this.patterns.size >= 32) this.patterns.delete(this.patterns.keys().next().value!);
      p = compilePattern(pattern, languageById(language));
      p.catch(() => this.patterns.delete(key));
      this.patterns.set(key, p);
    }
    return p;
  }

  private needsOf(compiled: CompiledPattern): Needs {
    let n = this.needs.get(compiled);
    if (!n) this.needs.set(compiled, (n = needsOf(kindsOf(compiled.root), compiled.literals)));
    return n;
  }

  /** Runs a job; `cancelled` is polled between files (the event loop gets a turn every few files). */
  async run(job: ShardJob, cancelled: () => boolean = () => false): Promise<FileOutcome[]> {
    const template = job.rewrite === undefined ? undefined : new RewriteTemplate(job.rewrite);
    this.cache.beginPass();
    const out: FileOutcome[] = [];
    let described = 0;
    const compiledFor = new Map<string, CompiledPattern | undefined>();
    for (const language of new Set(job.files.map((f) => f.language))) {
      compiledFor.set(
        language,
        await this.compiled(job.pattern, language).catch((err: unknown) => {
          if (err instanceof ToolError) return undefined;
          throw err;
        }),
      );
    }
    // A file whose summary rules it out is neither read nor parsed. Each file's summary is
    // looked up just before its read, so summaries the background index delivers while this
    // job runs (between its turns of the event loop) count too.
    const skip: boolean[] = [];
    const ruledOut = (f: JobFile): boolean => {
      const compiled = compiledFor.get(f.language);
      if (!compiled) return true;
      const summary = this.cache.summary(f.abs, f.mtimeMs, f.size, f.language);
      return !!summary && !mayMatch(summary, this.needsOf(compiled));
    };
    // Reads run ahead of parsing: one file at a time would wait on the disk most of the time.
    const loads: (Promise<CachedFile | undefined> | undefined)[] = [];
    const loadAhead = (upTo: number) => {
      for (let i = loads.length; i < Math.min(upTo, job.files.length); i++) {
        const f = job.files[i];
        skip[i] = ruledOut(f);
        loads.push(skip[i] ? undefined : this.cache.load(f.abs, f.mtimeMs, f.size).catch(() => undefined)); // vanished since the walk: skip
      }
    };
    for (const [i, f] of job.files.entries()) {
      if (i % YIELD_EVERY === YIELD_EVERY - 1) await new Promise((r) => setImmediate(r));
      if (cancelled()) throw new ToolError('cancelled: the search was stopped');
      loadAhead(i + READ_AHEAD);
      const compiled = compiledFor.get(f.language);
      if (!compiled) continue;
      if (skip[i]) {
        out.push({ abs: f.abs, prefiltered: true, total: 0, matches: [] });
        continue;
      }
      const file = await loads[i];
      if (!file) continue;
      if (file.kind === 'binary') {
        out.push({ abs: f.abs, binary: true, total: 0, matches: [] });
        continue;
      }
      const source = file.source;
      if (!compiled.literals.every((word) => source.includes(word))) {
        out.push({ abs: f.abs, prefiltered: true, total: 0, matches: [] });
        continue;
      }
      const outcome = await this.cache.withTree(f.abs, file, compiled.language, (tree): FileOutcome => {
        const matches = findAll(compiled, tree, source);
        const result: FileOutcome = { abs: f.abs, total: matches.length, matches: [] };
        for (const m of matches) {
          if (described >= job.limit) break;
          result.matches.push(plain(m, source));
          described++;
        }
        if (template && matches.length > 0) {
          const { text, applied } = applyReplacements(source, matches, template);
          if (text !== source) result.edit = { expected: source, next: text, applied };
        }
        return result;
      });
      out.push(outcome);
    }
    return out;
  }

  /** Takes a tree parsed by the background indexer. */
  adopt(found: IndexedFile): boolean {
    return this.cache.adopt(
      found.abs,
      found.mtimeMs,
      found.size,
      found.utf8Bytes,
      FlatTree.revive(found.tree, found.summary.language),
      found.summary,
    );
  }

  invalidate(abs: string): void {
    this.cache.invalidate(abs);
  }

  clear(): void {
    this.cache.clear();
  }
}
