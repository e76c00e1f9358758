/**
 * Parser and applier for the patch envelope agent harnesses commonly emit:
 *
 *   *** Begin Patch
 *   *** Add File: path        (every following line starts with "+")
 *   *** Delete File: path
 *   *** Update File: path
 *   *** Move to: new/path     (optional, right after Update File)
 *   @@ optional context line
 *    context / -removed / +added lines
 *   *** End of File           (optional: the hunk is anchored at the end)
 *   *** End Patch
 */

export type PatchOp =
  | { kind: 'add'; path: string; content: string }
  | { kind: 'delete'; path: string }
  | { kind: 'update'; path: string; moveTo?: string; hunks: Hunk[] };

export interface Hunk {
  /** Text after "@@", used to locate the hunk when the context lines repeat. */
  anchor: string;
  oldLines: string[];
  newLines: string[];
  atEnd: boolean;
}

export class PatchError extends Error {}

const BEGIN = '*** Begin Patch';
const END = '*** End Patch';

export function parsePatch(input: string): PatchOp[] {
  const lines = input.replace(/\r\n/g, '\n').split('\n');
  while (lines.length > 0 && lines[lines.length - 1].trim() === '') lines.pop();
  let i = 0;
  while (i < lines.length && lines[i].trim() === '') i++;
  if (lines[i]?.trim() !== BEGIN) throw new PatchError(`patch must start with "${BEGIN}"`);
  if (lines[lines.length - 1]?.trim() !== END) throw new PatchError(`patch must end with "${END}"`);
  const body = lines.slice(i + 1, lines.length - 1);
  const ops: PatchOp[] = [];
  let k = 0;
  const header = (l: string, prefix: string) => (l.startsWith(prefix) ? l.slice(prefix.length).trim() : null);
  while (k < body.length) {
    const line = body[k];
    let p: string | null;
    if ((p = header(line, '*** Add File:')) !== null) {
      k++;
      const content: string[] = [];
      while (k < body.length && !body[k].startsWith('*** ')) {
        if (!body[k].startsWith('+'))
          throw new PatchError(`line ${k + 2}: every line of an added file must start with "+"`);
        content.push(body[k].slice(1));
        k++;
      }
      ops.push({ kind: 'add', path: requirePath(p, k), content: content.length ? `${content.join('\n')}\n` : '' });
    } else if ((p = header(line, '*** Delete File:')) !== null) {
      ops.push({ kind: 'delete', path: requirePath(p, k) });
      k++;
    } else if ((p = header(line, '*** Update File:')) !== null) {
      const path = requirePath(p, k);
      k++;
      let moveTo: string | undefined;
      const mv = body[k] !== undefined ? header(body[k], '*** Move to:') : null;
      if (mv !== null) {
        moveTo = requirePath(mv, k);
        k++;
      }
      const hunks: Hunk[] = [];
      let current: Hunk | null = null;
      while (k < body.length && !isFileHeader(body[k])) {
        const l = body[k];
        if (l.startsWith('@@')) {
          current = { anchor: l.slice(2).trim(), oldLines: [], newLines: [], atEnd: false };
          hunks.push(current);
        } else if (l === '*** End of File') {
          if (!current) throw new PatchError(`line ${k + 2}: "*** End of File" outside a hunk`);
          current.atEnd = true;
        } else {
          if (!current) {
            // A hunk may start without "@@" when it is the first one.
            current = { anchor: '', oldLines: [], newLines: [], atEnd: false };
            hunks.push(current);
          }
          const tag = l[0] ?? ' ';
          const rest = l.slice(1);
          if (tag === ' ' || l === '') {
            current.oldLines.push(rest);
            current.newLines.push(rest);
          } else if (tag === '-') current.oldLines.push(rest);
          else if (tag === '+') current.newLines.push(rest);
          else throw new PatchError(`line ${k + 2}: a hunk line must start with " ", "-" or "+": ${JSON.stringify(l)}`);
        }
        k++;
      }
      if (hunks.length === 0 && !moveTo) throw new PatchError(`update of ${path} has no hunks`);
      ops.push({ kind: 'update', path, moveTo, hunks });
    } else if (line.trim() === '') {
      k++;
    } else {
      throw new PatchError(
        `line ${k + 2}: expected a file header ("*** Add File:", "*** Update File:", "*** Delete File:"), got ${JSON.stringify(line)}`,
      );
    }
  }
  if (ops.length === 0) throw new PatchError('patch changes no file');
  return ops;
}

function isFileHeader(l: string): boolean {
  return l.startsWith('*** Add File:') || l.startsWith('*** Delete File:') || l.startsWith('*** Update File:');
}

function requirePath(p: string, k: number): string {
  if (!p) throw new PatchError(`line ${k + 1}: file header without a path`);
  return p;
}

/** Finds `needle` in `hay` at or after `from`: exact, then ignoring trailing, then all surrounding whitespace. */
function seek(hay: string[], needle: string[], from: number, atEnd: boolean): number {
  if (needle.length === 0) return atEnd ? hay.length : from;
  const norms: ((s: string) => string)[] = [(s) => s, (s) => s.trimEnd(), (s) => s.trim()];
  for (const norm of norms) {
    const want = needle.map(norm);
    const last = hay.length - needle.length;
    const starts = atEnd ? [last] : range(from, last);
    for (const s of starts) {
      if (s < from) continue;
      let hit = true;
      for (let j = 0; j < want.length; j++) {
        if (norm(hay[s + j]) !== want[j]) {
          hit = false;
          break;
        }
      }
      if (hit) return s;
    }
  }
  return -1;
}

function range(a: number, b: number): number[] {
  const out: number[] = [];
  for (let i = a; i <= b; i++) out.push(i);
  return out;
}

/** Applies an update's hunks to a file's text; throws PatchError naming the hunk that does not fit. */
export function applyHunks(original: string, hunks: Hunk[], file: string): string {
  const endsWithNewline = original.endsWith('\n');
  const lines = original.split('\n');
  if (endsWithNewline) lines.pop();
  let cursor = 0;
  const out: string[] = [];
  hunks.forEach((h, n) => {
    let from = cursor;
    if (h.anchor) {
      const a = seek(lines, [h.anchor], cursor, false);
      if (a < 0) throw new PatchError(`${file}: hunk ${n + 1}: context line "@@ ${h.anchor}" not found`);
      // The anchor line itself may be part of the hunk's own context.
      from = h.oldLines[0] !== undefined && lines[a].trim() === h.oldLines[0].trim() ? a : a + 1;
    }
    const at = seek(lines, h.oldLines, from, h.atEnd);
    if (at < 0) {
      const shown = h.oldLines
        .slice(0, 6)
        .map((l) => `  ${l}`)
        .join('\n');
      throw new PatchError(`${file}: hunk ${n + 1} does not match the file; expected these lines:\n${shown}`);
    }
    out.push(...lines.slice(cursor, at), ...h.newLines);
    cursor = at + h.oldLines.length;
  });
  out.push(...lines.slice(cursor));
  return out.join('\n') + (endsWithNewline || out.length > 0 ? '\n' : '');
}
