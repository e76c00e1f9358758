import type { Language, Tree } from 'web-tree-sitter';
import { wasmBinding } from './languages';

/** The members of a syntax node the matcher, rewrite and results use. */
export interface SyntaxNode {
  readonly id: number;
  readonly tree: unknown;
  readonly typeId: number;
  readonly type: string;
  readonly isNamed: boolean;
  readonly isExtra: boolean;
  readonly isMissing: boolean;
  readonly startIndex: number;
  readonly endIndex: number;
  readonly startPosition: { row: number };
  readonly text: string;
  readonly childCount: number;
  readonly children: SyntaxNode[];
  readonly parent: SyntaxNode | null;
}

const NAMED = 1;
const EXTRA = 2;
const MISSING = 4;

/** Per language, the names of its node kinds (shared by all its trees) and which are named. */
const kindNames = new WeakMap<Language, readonly string[]>();
const kindNamed = new WeakMap<Language, Uint8Array>();
const kindNamesById = new Map<string, readonly string[]>();

/** Per language: which node kinds turned out to be extras (comments) the first time each was seen. */
const extraKinds = new WeakMap<Language, Map<number, boolean>>();

/**
 * A syntax tree copied out of tree-sitter into typed arrays, nodes in document (pre-)order.
 * A tree-sitter tree costs about 27 bytes per character of Python; this copy about 4, and it
 * lives in ordinary JavaScript memory, so it can be moved between threads and is freed by the
 * garbage collector. Only visible nodes are kept (those a cursor visits).
 */
export class FlatTree {
  constructor(
    readonly source: string,
    readonly typeNames: readonly string[],
    readonly typeIds: Uint16Array,
    readonly flags: Uint8Array,
    readonly starts: Uint32Array,
    readonly ends: Uint32Array,
    /** Where each line of the source starts (rows are found by binary search). */
    readonly lines: Uint32Array,
    readonly parents: Int32Array,
    /** Nodes in each node's subtree, itself included: the next sibling is at i + size. */
    readonly sizes: Uint32Array,
  ) {}

  /** The 0-based line of a character offset. */
  rowOf(index: number): number {
    let lo = 0;
    let hi = this.lines.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (this.lines[mid] <= index) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  get nodeCount(): number {
    return this.typeIds.length;
  }

  /** Bytes the arrays hold (the source is counted by the cache). */
  get bytes(): number {
    return (
      this.typeIds.byteLength +
      this.flags.byteLength +
      this.starts.byteLength +
      this.ends.byteLength +
      this.lines.byteLength +
      this.parents.byteLength +
      this.sizes.byteLength
    );
  }

  get rootNode(): FlatNode {
    return new FlatNode(this, 0);
  }

  node(i: number): FlatNode {
    return new FlatNode(this, i);
  }

  /** Node kinds present in the tree, as a bit set indexed by kind id. */
  kinds(): Uint32Array {
    const bits = new Uint32Array(Math.ceil(this.typeNames.length / 32) + 1);
    for (const t of this.typeIds) bits[t >>> 5] |= 1 << (t & 31);
    return bits;
  }

  /**
   * The smallest node spanning [start, end), as tree-sitter's `descendantForIndex` finds it:
   * descend into the first child that ends at or after `end` (and after `start`) and starts at
   * or before `start`.
   */
  descendantForIndex(start: number, end: number): FlatNode {
    let node = 0;
    for (;;) {
      let next = -1;
      const stop = node + this.sizes[node];
      for (let c = node + 1; c < stop; c += this.sizes[c]) {
        if (this.ends[c] < end || this.ends[c] <= start) continue;
        if (start < this.starts[c]) break;
        next = c;
        break;
      }
      if (next < 0) return new FlatNode(this, node);
      node = next;
    }
  }

  /** Every node (root included) whose kind is named `type`, in document order. */
  *ofType(type: string): Generator<FlatNode> {
    const ids = new Set<number>();
    this.typeNames.forEach((name, id) => name === type && ids.add(id));
    for (let i = 0; i < this.typeIds.length; i++) if (ids.has(this.typeIds[i])) yield new FlatNode(this, i);
  }

  /** Copies the tree out of tree-sitter. The tree-sitter tree stays the caller's to delete. */
  static from(tree: Tree, source: string, language: Language): FlatTree {
    let extras = extraKinds.get(language);
    if (!extras) extraKinds.set(language, (extras = new Map()));
    let names = kindNames.get(language);
    let named = kindNamed.get(language);
    if (!names || !named) {
      const list: string[] = [];
      named = new Uint8Array(language.nodeTypeCount);
      for (let id = 0; id < language.nodeTypeCount; id++) {
        list.push(language.nodeTypeForId(id) ?? '');
        named[id] = language.nodeTypeIsNamed(id) ? 1 : 0;
      }
      kindNames.set(language, (names = list));
      kindNamed.set(language, named);
    }
    const n = tree.rootNode.descendantCount;
    const typeIds = new Uint16Array(n);
    const flags = new Uint8Array(n);
    const starts = new Uint32Array(n);
    const ends = new Uint32Array(n);
    const parents = new Int32Array(n);
    const sizes = new Uint32Array(n);
    const stack: number[] = [];
    // The walk calls tree-sitter's exports directly: web-tree-sitter's TreeCursor copies the
    // cursor into WebAssembly memory and back around every call, which cost as much as the
    // parse itself. Here the cursor stays in the transfer buffer the exports read and update.
    const wasm = wasmBinding();
    const buffer = wasm._ts_init() >> 2;
    const cursor = tree.walk() as unknown as Record<number, number>;
    const at = (tree as unknown as Record<number, number>)[0];
    const heap = () => wasm.HEAP32; // replaced when WebAssembly memory grows
    for (let k = 0; k < 4; k++) heap()[buffer + k] = cursor[k];
    const saved = new Int32Array(4);
    let i = 0;
    try {
      for (;;) {
        if (i >= n) throw new Error('the tree has more nodes than it counted');
        const t = wasm._ts_tree_cursor_current_node_type_id_wasm(at);
        typeIds[i] = t;
        // What the kind tells is not read per node.
        const start = wasm._ts_tree_cursor_start_index_wasm(at);
        const end = wasm._ts_tree_cursor_end_index_wasm(at);
        let f = named[t] ? NAMED : 0;
        if (start === end && wasm._ts_tree_cursor_current_node_is_missing_wasm(at)) f |= MISSING;
        // Whether a kind is an extra (a comment) is read from a node the first time the kind is
        // seen, and again for every node of a kind that was an extra once.
        const known = extras.get(t);
        if (known !== false) {
          // The node is written where the cursor lives: keep the cursor aside meanwhile.
          saved.set(heap().subarray(buffer, buffer + 4));
          wasm._ts_tree_cursor_current_node_wasm(at);
          const extra = wasm._ts_node_is_extra_wasm(at) === 1;
          heap().set(saved, buffer);
          if (known === undefined || extra) extras.set(t, extra);
          if (extra) f |= EXTRA;
        }
        flags[i] = f;
        starts[i] = start;
        ends[i] = end;
        parents[i] = stack.length ? stack[stack.length - 1] : -1;
        i++;
        if (wasm._ts_tree_cursor_goto_first_child_wasm(at) === 1) {
          stack.push(i - 1);
          continue;
        }
        sizes[i - 1] = 1;
        let done = false;
        while (wasm._ts_tree_cursor_goto_next_sibling_wasm(at) !== 1) {
          if (wasm._ts_tree_cursor_goto_parent_wasm(at) !== 1) {
            done = true;
            break;
          }
          const p = stack.pop()!;
          sizes[p] = i - p;
        }
        if (done) break;
      }
    } finally {
      // Moving may have reallocated the cursor's stack: give the cursor its state back to free it.
      for (let k = 0; k < 4; k++) cursor[k] = heap()[buffer + k];
      (cursor as unknown as { delete(): void }).delete();
    }
    const fit = <T extends Uint8Array | Uint16Array | Uint32Array | Int32Array>(a: T): T =>
      i === n ? a : (a.slice(0, i) as T);
    return new FlatTree(
      source,
      names,
      fit(typeIds),
      fit(flags),
      fit(starts),
      fit(ends),
      lineStarts(source),
      fit(parents),
      fit(sizes),
    );
  }

  /** The arrays to hand to postMessage's transfer list. */
  transferables(): ArrayBuffer[] {
    return [this.typeIds, this.flags, this.starts, this.ends, this.lines, this.parents, this.sizes].map(
      (a) => a.buffer as ArrayBuffer,
    );
  }

  /**
   * Rebuilds a tree that crossed threads (structured clone keeps the arrays, not the class),
   * sharing one copy of the kind names per language.
   */
  static revive(t: FlatTree, languageId: string): FlatTree {
    let names = kindNamesById.get(languageId);
    if (!names || names.length !== t.typeNames.length) kindNamesById.set(languageId, (names = t.typeNames));
    return new FlatTree(t.source, names, t.typeIds, t.flags, t.starts, t.ends, t.lines, t.parents, t.sizes);
  }
}

function lineStarts(source: string): Uint32Array {
  const starts = [0];
  for (let at = source.indexOf('\n'); at >= 0; at = source.indexOf('\n', at + 1)) starts.push(at + 1);
  return Uint32Array.from(starts);
}

/** One node of a FlatTree; made on demand, compared by `id`. */
export class FlatNode implements SyntaxNode {
  constructor(
    readonly tree: FlatTree,
    readonly id: number,
  ) {}

  get typeId(): number {
    return this.tree.typeIds[this.id];
  }
  get type(): string {
    return this.tree.typeNames[this.typeId];
  }
  get isNamed(): boolean {
    return (this.tree.flags[this.id] & NAMED) !== 0;
  }
  get isExtra(): boolean {
    return (this.tree.flags[this.id] & EXTRA) !== 0;
  }
  get isMissing(): boolean {
    return (this.tree.flags[this.id] & MISSING) !== 0;
  }
  get startIndex(): number {
    return this.tree.starts[this.id];
  }
  get endIndex(): number {
    return this.tree.ends[this.id];
  }
  get startPosition(): { row: number } {
    return { row: this.tree.rowOf(this.startIndex) };
  }
  get text(): string {
    return this.tree.source.slice(this.startIndex, this.endIndex);
  }
  get childCount(): number {
    let count = 0;
    const stop = this.id + this.tree.sizes[this.id];
    for (let c = this.id + 1; c < stop; c += this.tree.sizes[c]) count++;
    return count;
  }
  get children(): FlatNode[] {
    const out: FlatNode[] = [];
    const stop = this.id + this.tree.sizes[this.id];
    for (let c = this.id + 1; c < stop; c += this.tree.sizes[c]) out.push(new FlatNode(this.tree, c));
    return out;
  }
  get parent(): FlatNode | null {
    const p = this.tree.parents[this.id];
    return p < 0 ? null : new FlatNode(this.tree, p);
  }
}
