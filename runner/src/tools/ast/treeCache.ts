import { readFileSync } from 'node:fs';
import { FlatTree } from './flatTree';
import { summarize, summaryBytes, type FileSummary } from './fileIndex';
import { loadLanguage, parserFor, type LanguageSpec } from './languages';

/** What the cache knows about one file at one (mtime, size). */
export type CachedFile = { kind: 'binary' } | { kind: 'text'; source: string; tree?: FlatTree; language?: string };

interface Entry {
  abs: string;
  mtimeMs: number;
  size: number;
  /** Absent once the entry was shrunk to its summary to make room. */
  file?: CachedFile;
  summary?: FileSummary;
  bytes: number;
  /** The pass (search) that last used the entry. */
  pass: number;
}

/** Bytes per character of a string: V8 keeps ASCII text in one byte per character. */
function sourceBytes(source: string, utf8Bytes: number): number {
  return utf8Bytes === source.length ? source.length : source.length * 2;
}

function looksBinary(buf: Buffer): boolean {
  return buf.subarray(0, 8192).includes(0);
}

/** Parses and copies out the tree, freeing tree-sitter's own at once. */
export async function parseFlat(source: string, language: LanguageSpec): Promise<FlatTree> {
  const parser = await parserFor(language);
  const tree = parser.parse(source);
  if (!tree) throw new Error(`the ${language.id} parser gave up`);
  try {
    return FlatTree.from(tree, source, await loadLanguage(language));
  } finally {
    tree.delete();
  }
}

/**
 * Source text, flat syntax trees (see flatTree.ts) and file summaries (see fileIndex.ts), so a
 * repeated query neither reads nor parses again, and skips files that cannot match. An entry
 * is valid while the file's mtime and size are unchanged; the write tools also drop entries
 * directly (see `invalidate`). Memory is bounded by an estimate. To make room, entries not
 * used by the current pass (search) first lose their text and tree, least recently used first,
 * keeping only their summary; then summaries go too. When everything cached belongs to the
 * current pass, the newcomer is not cached instead: a search over more code than fits thus
 * keeps most of its trees for the next time, where plain LRU would evict each tree just before
 * it is needed again. Trees indexed in the background only fill free room (see `adopt`).
 */
export class TreeCache {
  private readonly entries = new Map<string, Entry>();
  private total = 0;
  private pass = 0;
  hits = 0;
  misses = 0;

  constructor(private readonly limitBytes: number) {}

  get bytes(): number {
    return this.total;
  }

  get size(): number {
    return this.entries.size;
  }

  /** Files whose tree is cached. */
  get trees(): number {
    let n = 0;
    for (const e of this.entries.values()) if (e.file?.kind === 'text' && e.file.tree) n++;
    return n;
  }

  /** Starts a new pass: what the previous passes used becomes evictable. */
  beginPass(): void {
    this.pass++;
  }

  private touch(e: Entry): void {
    this.entries.delete(e.abs);
    this.entries.set(e.abs, e);
    e.pass = this.pass;
  }

  private drop(e: Entry): void {
    this.entries.delete(e.abs);
    this.total -= e.bytes;
  }

  /** Keeps only the entry's summary (or nothing, without one). */
  private shrink(e: Entry): void {
    if (!e.summary) {
      this.drop(e);
      return;
    }
    const bytes = summaryBytes(e.summary);
    this.total -= e.bytes - bytes;
    e.bytes = bytes;
    e.file = undefined;
  }

  /** Makes room for `extra` more bytes from entries of earlier passes; false if it cannot. */
  private makeRoom(extra: number): boolean {
    if (this.total + extra <= this.limitBytes) return true;
    for (const e of this.entries.values()) {
      if (e.pass !== this.pass && e.file) this.shrink(e);
      if (this.total + extra <= this.limitBytes) return true;
    }
    for (const e of this.entries.values()) {
      if (e.pass !== this.pass) this.drop(e);
      if (this.total + extra <= this.limitBytes) return true;
    }
    return false;
  }

  private valid(abs: string, mtimeMs: number, size: number): Entry | undefined {
    const e = this.entries.get(abs);
    if (e && e.mtimeMs === mtimeMs && e.size === size) return e;
    if (e) this.drop(e);
    return undefined;
  }

  /** The file's summary, if one is known for this version of it. */
  summary(abs: string, mtimeMs: number, size: number, language: string): FileSummary | undefined {
    const s = this.valid(abs, mtimeMs, size)?.summary;
    return s?.language === language ? s : undefined;
  }

  /** The file's text (or that it is binary), read from disk only when it changed. */
  async load(abs: string, mtimeMs: number, size: number): Promise<CachedFile> {
    const known = this.valid(abs, mtimeMs, size);
    if (known?.file) {
      this.hits++;
      this.touch(known);
      return known.file;
    }
    this.misses++;
    // Synchronous on purpose: the cache runs on search workers, where nothing else waits, and
    // one blocking read of a file in the page cache is far cheaper than fs.promises' four
    // thread-pool round trips (open, stat, read, close).
    const buf = readFileSync(abs);
    const file: CachedFile = looksBinary(buf) ? { kind: 'binary' } : { kind: 'text', source: buf.toString('utf8') };
    const bytes =
      (file.kind === 'text' ? sourceBytes(file.source, buf.length) : 64) +
      (known?.summary ? summaryBytes(known.summary) : 0);
    if (known) {
      this.touch(known);
      if (this.makeRoom(bytes - known.bytes)) {
        known.file = file;
        this.total += bytes - known.bytes;
        known.bytes = bytes;
      }
    } else if (this.makeRoom(bytes)) {
      this.entries.set(abs, { abs, mtimeMs, size, file, bytes, pass: this.pass });
      this.total += bytes;
    }
    return file;
  }

  /**
   * Runs `use` on the file's tree in `language`, parsed on first use and kept while the entry
   * lives (with the file's summary, which outlives the tree).
   */
  async withTree<T>(
    abs: string,
    file: CachedFile & { kind: 'text' },
    language: LanguageSpec,
    use: (tree: FlatTree) => T,
  ): Promise<T> {
    if (file.tree && file.language === language.id) return use(file.tree);
    let tree: FlatTree;
    try {
      tree = await parseFlat(file.source, language);
    } catch {
      throw new Error(`the ${language.id} parser gave up on ${abs}`);
    }
    const entry = this.entries.get(abs);
    if (entry && entry.file === file) {
      const summary = summarize(tree, language.id);
      const grow = tree.bytes + summaryBytes(summary) - (entry.summary ? summaryBytes(entry.summary) : 0);
      if (this.makeRoom(grow) && entry.file === file) {
        file.tree = tree;
        file.language = language.id;
        entry.summary = summary;
        this.total += grow;
        entry.bytes += grow;
      }
    }
    return use(tree);
  }

  /**
   * Takes a tree parsed in the background, if it fits without evicting anything and the cache
   * does not already hold this version of the file.
   */
  adopt(abs: string, mtimeMs: number, size: number, utf8Bytes: number, tree: FlatTree, summary: FileSummary): boolean {
    const known = this.valid(abs, mtimeMs, size);
    if (known?.file?.kind === 'text' && known.file.tree) return false;
    const withTree = sourceBytes(tree.source, utf8Bytes) + tree.bytes + summaryBytes(summary);
    const before = known?.bytes ?? 0;
    const file: CachedFile = { kind: 'text', source: tree.source, tree, language: summary.language };
    // Whole entry when it fits, else the summary alone (it still narrows the next query, and
    // is worth more per byte than a tree: other background trees give way to it).
    const [bytes, keep] =
      this.total - before + withTree <= this.limitBytes ? [withTree, file] : [summaryBytes(summary), undefined];
    if (this.total - before + bytes > this.limitBytes) {
      for (const e of this.entries.values()) {
        if (this.total - before + bytes <= this.limitBytes) break;
        if (e.pass === -1 && e.file && e !== known) this.shrink(e);
      }
      if (this.total - before + bytes > this.limitBytes) return false;
    }
    if (known) this.drop(known);
    // Background entries belong to no pass: the next search may evict them first.
    this.entries.set(abs, { abs, mtimeMs, size, file: keep, summary, bytes, pass: -1 });
    this.total += bytes;
    return keep !== undefined;
  }

  invalidate(abs: string): void {
    const e = this.entries.get(abs);
    if (e) this.drop(e);
  }

  clear(): void {
    for (const e of [...this.entries.values()]) this.drop(e);
  }
}
