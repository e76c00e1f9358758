import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type {
  Diagnostic,
  DocumentSymbol,
  Location,
  LocationLink,
  SymbolInformation,
  WorkspaceSymbol,
} from 'vscode-languageserver-protocol';
import { splitLines } from './position';

export const toUri = (abs: string) => pathToFileURL(abs).href;

export function fromUri(uri: string): string {
  return uri.startsWith('file:') ? fileURLToPath(uri) : uri;
}

const SOURCE_LINE_MAX = 160;
const SEVERITY = ['', 'error', 'warning', 'info', 'hint'];
const SYMBOL_KIND = [
  '',
  'file',
  'module',
  'namespace',
  'package',
  'class',
  'method',
  'property',
  'field',
  'constructor',
  'enum',
  'interface',
  'function',
  'variable',
  'constant',
  'string',
  'number',
  'boolean',
  'array',
  'object',
  'key',
  'null',
  'enum member',
  'struct',
  'event',
  'operator',
  'type parameter',
];

export function severityName(s: number | undefined): string {
  return SEVERITY[s ?? 1] || 'error';
}

export function symbolKindName(k: number): string {
  return SYMBOL_KIND[k] || 'symbol';
}

function readSourceSync(abs: string): string[] | undefined {
  try {
    return splitLines(readFileSync(abs, 'utf8'));
  } catch {
    return undefined;
  }
}

/** Formats paths for a model: workspace-relative inside the workspace, absolute outside it. */
export class LocationFormatter {
  constructor(private readonly workspaceRoot: string) {}

  display(abs: string): string {
    const rel = path.relative(this.workspaceRoot, abs);
    return rel.startsWith('..') || path.isAbsolute(rel) ? abs : rel.split(path.sep).join('/');
  }

  /** The trimmed source line; `cache` lives for one answer only, files change between calls. */
  async sourceLine(
    abs: string,
    line0: number,
    cache = new Map<string, Promise<string[] | undefined>>(),
  ): Promise<string> {
    let lines = cache.get(abs);
    if (!lines) {
      // Small source files, read once per answer: a synchronous read skips a thread-pool round
      // trip per file, which is most of what formatting a location list costs.
      lines = Promise.resolve(readSourceSync(abs));
      cache.set(abs, lines);
    }
    const text = (await lines)?.[line0]?.trim() ?? '';
    return text.length > SOURCE_LINE_MAX ? `${text.slice(0, SOURCE_LINE_MAX)}…` : text;
  }

  /** `path:line: source line`, one per location, sorted and de-duplicated. */
  async locations(locs: (Location | LocationLink)[]): Promise<string[]> {
    const flat = locs.map((l) =>
      'targetUri' in l ? { uri: l.targetUri, range: l.targetSelectionRange ?? l.targetRange } : l,
    );
    const seen = new Set<string>();
    const cache = new Map<string, Promise<string[] | undefined>>();
    const out: { key: string; text: string }[] = [];
    for (const l of flat) {
      const abs = fromUri(l.uri);
      const k = `${abs}:${l.range.start.line}:${l.range.start.character}`;
      if (seen.has(k)) continue;
      seen.add(k);
      const where = `${this.display(abs)}:${l.range.start.line + 1}`;
      out.push({
        key: `${this.display(abs)}\u0000${String(l.range.start.line).padStart(9, '0')}`,
        text: `${where}${await this.sourceLine(abs, l.range.start.line, cache).then((src) => (src ? `: ${src}` : ''))}`,
      });
    }
    return out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)).map((o) => o.text);
  }

  diagnostic(abs: string, d: Diagnostic): string {
    const code = d.code === undefined || d.code === null ? '' : ` [${d.code}]`;
    const source = d.source ? ` (${d.source})` : '';
    return `${this.display(abs)}:${d.range.start.line + 1}:${d.range.start.character + 1}: ${severityName(d.severity)}${code} ${d.message.replace(/\s*\n\s*/g, ' ')}${source}`;
  }

  async workspaceSymbols(syms: (SymbolInformation | WorkspaceSymbol)[]): Promise<string[]> {
    return syms.map((s) => {
      // A WorkspaceSymbol may name only its file; its range would come from workspaceSymbol/resolve.
      const line = 'range' in s.location ? `:${s.location.range.start.line + 1}` : '';
      const where = `${this.display(fromUri(s.location.uri))}${line}`;
      return `${symbolKindName(s.kind)} ${s.name}${s.containerName ? ` (in ${s.containerName})` : ''} — ${where}`;
    });
  }

  /** Document symbols as an indented outline, flattened in reading order. */
  documentSymbols(syms: (DocumentSymbol | SymbolInformation)[]): string[] {
    const out: string[] = [];
    const walk = (list: DocumentSymbol[], depth: number) => {
      for (const s of list) {
        out.push(
          `${'  '.repeat(depth)}${symbolKindName(s.kind)} ${s.name}${s.detail ? ` ${s.detail.replace(/\s+/g, ' ').slice(0, 80)}` : ''} — line ${s.selectionRange.start.line + 1}`,
        );
        if (s.children) walk(s.children, depth + 1);
      }
    };
    if (syms.length > 0 && 'location' in syms[0]) {
      for (const s of syms as SymbolInformation[])
        out.push(
          `${symbolKindName(s.kind)} ${s.name}${s.containerName ? ` (in ${s.containerName})` : ''} — line ${s.location.range.start.line + 1}`,
        );
    } else walk(syms as DocumentSymbol[], 0);
    return out;
  }
}

/** Folds identical consecutive lines (two uses on one source line) into one, counted. */
export function foldRepeats(lines: string[]): string[] {
  const out: { text: string; n: number }[] = [];
  for (const l of lines) {
    const last = out[out.length - 1];
    if (last && last.text === l) last.n++;
    else out.push({ text: l, n: 1 });
  }
  return out.map((o) => (o.n > 1 ? `${o.text}  (${o.n} on this line)` : o.text));
}

/** Cuts a list at `cap` and says so: "showing 50 of 312". */
export function capped(lines: string[], cap: number, noun: string): { lines: string[]; note: string } {
  if (lines.length <= cap) return { lines, note: `${lines.length} ${noun}` };
  return { lines: lines.slice(0, cap), note: `showing ${cap} of ${lines.length} ${noun}` };
}
