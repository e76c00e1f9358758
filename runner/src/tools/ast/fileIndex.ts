import type { FlatTree } from './flatTree';

/**
 * What a file holds, in a few hundred bytes: the node kinds of its tree (a bit set) and its
 * identifier-like words (a Bloom filter). A pattern's node kinds and words must all occur in
 * any file it matches, so a file whose summary lacks one is skipped without its tree.
 */
export interface FileSummary {
  language: string;
  kinds: Uint32Array;
  words: Uint32Array;
}

const WORD = /[A-Za-z_][A-Za-z0-9_]*/g;
const BITS_PER_WORD = 10;
const HASHES = 4;

function hashes(word: string): [number, number] {
  let a = 2166136261;
  let b = 5381;
  for (let i = 0; i < word.length; i++) {
    const c = word.charCodeAt(i);
    a = Math.imul(a ^ c, 16777619);
    b = Math.imul(b, 33) ^ c;
  }
  return [a >>> 0, (b | 1) >>> 0];
}

function bloomHas(bits: Uint32Array, word: string): boolean {
  const m = bits.length * 32;
  const [a, b] = hashes(word);
  for (let k = 0; k < HASHES; k++) {
    const bit = (a + k * b) % m;
    if ((bits[bit >>> 5] & (1 << (bit & 31))) === 0) return false;
  }
  return true;
}

export function summarize(tree: FlatTree, language: string): FileSummary {
  const words = new Set(tree.source.match(WORD));
  const bits = new Uint32Array(Math.max(8, Math.ceil((words.size * BITS_PER_WORD) / 32)));
  const m = bits.length * 32;
  for (const w of words) {
    const [a, b] = hashes(w);
    for (let k = 0; k < HASHES; k++) {
      const bit = (a + k * b) % m;
      bits[bit >>> 5] |= 1 << (bit & 31);
    }
  }
  return { language, kinds: tree.kinds(), words: bits };
}

export function summaryBytes(s: FileSummary): number {
  return s.kinds.byteLength + s.words.byteLength + 96;
}

/** What a pattern needs of a file: node kinds (by id) and identifier-like words. */
export interface Needs {
  kinds: number[];
  words: string[];
}

const WHOLE_WORD = /^[A-Za-z_][A-Za-z0-9_]*$/;

export function needsOf(kinds: Iterable<number>, literals: string[]): Needs {
  return { kinds: [...new Set(kinds)], words: literals.filter((l) => WHOLE_WORD.test(l)) };
}

/** False when the file certainly has no match (a kind or a word is missing). */
export function mayMatch(s: FileSummary, needs: Needs): boolean {
  for (const k of needs.kinds)
    if (k >>> 5 >= s.kinds.length || (s.kinds[k >>> 5] & (1 << (k & 31))) === 0) return false;
  return needs.words.every((w) => bloomHas(s.words, w));
}
