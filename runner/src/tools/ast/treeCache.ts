import { readFileSync } from 'node:fs';
import type { Tree } from 'web-tree-sitter';
import { parserFor, type LanguageSpec } from './languages';

/** What the cache knows about one file at one (mtime, size). */
export type CachedFile =
  | { kind: 'binary' }
  | { kind: 'text'; source: string; tree?: Tree; language?: string };

interface Entry {
  abs: string;
  mtimeMs: number;
  size: number;
  file: CachedFile;
  bytes: number;
  /** The pass (search) that last used the entry. */
  pass: number;
}

/**
 * Bytes a tree-sitter tree takes per character of source, measured as the growth of the
 * process when parsing Python's standard library (26.7) and the TypeScript under
 * node_modules (15.5) with web-tree-sitter.
 */
const TREE_BYTES_PER_CHAR: Record<string, number> = { python: 27, typescript: 16, tsx: 16, javascript: 16 };
const DEFAULT_TREE_BYTES_PER_CHAR = 27;
/** A JavaScript string holds two bytes per character. */
const SOURCE_BYTES_PER_CHAR = 2;

function looksBinary(buf: Buffer): boolean {
  return buf.subarray(0, 8192).includes(0);
}

/**
 * Source text and parsed trees per file, so a repeated query does not read or parse again.
 * An entry is valid while the file's mtime and size are unchanged; the write tools also
 * drop entries directly (see `invalidate`). Memory is bounded by an estimate. To make room,
 * entries not used by the current pass (search) are evicted, least recently used first; when
 * everything cached belongs to the current pass, the newcomer is not cached instead. A search
 * over more code than fits thus keeps most of its trees for the next time, where plain LRU
 * would evict each tree just before it is needed again.
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
    if (e.file.kind === 'text') e.file.tree?.delete();
  }

  /** Makes room for `extra` more bytes by evicting entries of earlier passes; false if it cannot. */
  private makeRoom(extra: number): boolean {
    for (const e of this.entries.values()) {
      if (this.total + extra <= this.limitBytes) return true;
      if (e.pass !== this.pass) this.drop(e);
    }
    return this.total + extra <= this.limitBytes;
  }

  /** The file's text (or that it is binary), read from disk only when it changed. */
  async load(abs: string, mtimeMs: number, size: number): Promise<CachedFile> {
    const known = this.entries.get(abs);
    if (known && known.mtimeMs === mtimeMs && known.size === size) {
      this.hits++;
      this.touch(known);
      return known.file;
    }
    this.misses++;
    if (known) this.drop(known);
    // Synchronous on purpose: the cache runs on search workers, where nothing else waits, and
    // one blocking read of a file in the page cache is far cheaper than fs.promises' four
    // thread-pool round trips (open, stat, read, close).
    const buf = readFileSync(abs);
    const file: CachedFile = looksBinary(buf) ? { kind: 'binary' } : { kind: 'text', source: buf.toString('utf8') };
    const again = this.entries.get(abs);
    if (again) this.drop(again);
    const bytes = file.kind === 'text' ? file.source.length * SOURCE_BYTES_PER_CHAR : 64;
    if (this.makeRoom(bytes)) {
      this.entries.set(abs, { abs, mtimeMs, size, file, bytes, pass: this.pass });
      this.total += bytes;
    }
    return file;
  }

  /**
   * Runs `use` on the file's tree in `language`, parsed on first use and kept while the entry
   * lives. `use` is synchronous so no other call can evict the tree while it is in use.
   */
  async withTree<T>(abs: string, file: CachedFile & { kind: 'text' }, language: LanguageSpec, use: (tree: Tree) => T): Promise<T> {
    if (file.tree && file.language === language.id) return use(file.tree);
    const parser = await parserFor(language);
    if (file.tree && file.language === language.id) return use(file.tree);
    const tree = parser.parse(file.source);
    if (!tree) throw new Error(`the ${language.id} parser gave up on ${abs}`);
    const entry = this.entries.get(abs);
    const bytes = file.source.length * (SOURCE_BYTES_PER_CHAR + (TREE_BYTES_PER_CHAR[language.id] ?? DEFAULT_TREE_BYTES_PER_CHAR));
    if (!entry || entry.file !== file || !this.makeRoom(bytes - entry.bytes)) {
      // Not cached (no room, or evicted meanwhile): use the tree once and free it.
      try {
        return use(tree);
      } finally {
        tree.delete();
      }
    }
    file.tree?.delete();
    file.tree = tree;
    file.language = language.id;
    this.total += bytes - entry.bytes;
    entry.bytes = bytes;
    return use(tree);
  }

  invalidate(abs: string): void {
    const e = this.entries.get(abs);
    if (e) this.drop(e);
  }

  clear(): void {
    for (const e of [...this.entries.values()]) this.drop(e);
  }
}
