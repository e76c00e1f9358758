import type { SyntaxNode as Node } from './flatTree';
import type { Captures, Match } from './matcher';

/**
 * Rewrite templates, indented the way ast-grep indents them: a multi-line capture keeps its
 * shape relative to the line it came from and takes the indentation of the spot it lands on
 * in the template; the whole replacement then takes the indentation of the matched line.
 */

type Piece = { text: string } | { capture: string; multi: boolean; indent: number };

/** Leading spaces of the line that `offset` is on (tabs are not counted, as in ast-grep). */
export function lineIndent(text: string, offset: number): number {
  const start = text.lastIndexOf('\n', offset - 1) + 1;
  let n = 0;
  while (start + n < offset && text[start + n] === ' ') n++;
  return n;
}

function indentLines(indent: number, text: string): string {
  if (indent === 0 || !text.includes('\n')) return text;
  const pad = ' '.repeat(indent);
  return text.split('\n').join(`\n${pad}`);
}

/** Text of source[start, end), later lines shifted left by the indentation of the first line. */
function deindented(source: string, start: number, end: number): string {
  const text = source.slice(start, end);
  if (!text.includes('\n')) return text;
  const indent = lineIndent(source, start);
  if (indent === 0) return text;
  const pad = ' '.repeat(indent);
  return text
    .split('\n')
    .map((line) => (line.startsWith(pad) ? line.slice(indent) : line))
    .join('\n');
}

export class RewriteTemplate {
  private readonly pieces: Piece[] = [];
  /** Names of captures the template refers to. */
  readonly names: string[] = [];

  constructor(readonly template: string) {
    const re = /\$(\$\$)?([A-Z_][A-Z0-9_]*)/g;
    let last = 0;
    for (let m = re.exec(template); m; m = re.exec(template)) {
      if (m.index > last) this.pieces.push({ text: template.slice(last, m.index) });
      this.pieces.push({ capture: m[2], multi: !!m[1], indent: lineIndent(template, m.index) });
      this.names.push(m[2]);
      last = m.index + m[0].length;
    }
    if (last < template.length) this.pieces.push({ text: template.slice(last) });
  }

  private capture(caps: Captures, name: string, multi: boolean, source: string): string | undefined {
    let nodes: Node[] | undefined;
    if (multi) nodes = caps.multi.get(name);
    else {
      const one = caps.single.get(name);
      nodes = one ? [one] : caps.multi.get(name);
    }
    if (!nodes || nodes.length === 0) return undefined;
    // A `$$$` run keeps the code between its nodes, separators and all.
    return deindented(source, nodes[0].startIndex, nodes[nodes.length - 1].endIndex);
  }

  /** The replacement text for one match of `source`. A capture the pattern did not bind is dropped. */
  render(match: Match, source: string): string {
    let out = '';
    for (const p of this.pieces) {
      if ('text' in p) out += p.text;
      else out += indentLines(p.indent, this.capture(match.captures, p.capture, p.multi, source) ?? '');
    }
    return indentLines(lineIndent(source, match.start), out);
  }
}

export interface Replacement {
  start: number;
  end: number;
  /** 1-based line of `start`. */
  line: number;
  before: string;
  after: string;
}

/**
 * Applies the replacements of one file. Matches come in document order with outer ones first;
 * a match that starts inside one already replaced is dropped (outermost wins, as in ast-grep).
 */
export function applyReplacements(
  source: string,
  matches: Match[],
  template: RewriteTemplate,
): { text: string; applied: Replacement[] } {
  const applied: Replacement[] = [];
  let out = '';
  let cursor = 0;
  for (const m of matches) {
    const { start, end } = m;
    if (start < cursor) continue;
    const after = template.render(m, source);
    out += source.slice(cursor, start) + after;
    applied.push({ start, end, line: m.node.startPosition.row + 1, before: source.slice(start, end), after });
    cursor = end;
  }
  return { text: out + source.slice(cursor), applied };
}
