import type { Node, Tree } from 'web-tree-sitter';
import { ToolError } from '../../tool';
import type { Parser } from 'web-tree-sitter';
import { parserFor, type LanguageSpec, type PatternContext } from './languages';
import { parseMetaVar, preprocessPattern, type MetaVar } from './metavar';

/**
 * A pattern compiled from code: leaves keep their text, inner nodes their children,
 * and any node whose whole text is a metavariable becomes that metavariable.
 */
export type PatternNode =
  | { kind: 'metavar'; metavar: MetaVar }
  | { kind: 'leaf'; typeId: number; type: string; text: string; named: boolean }
  | { kind: 'inner'; typeId: number; type: string; children: PatternNode[] };

export interface CompiledPattern {
  language: LanguageSpec;
  root: PatternNode;
  /** Identifier-like words every match must contain: files without them are not parsed. */
  literals: string[];
  /**
   * The pattern root ends in a token only the parsing context supplied (Dart's `;` after a
   * call), so a match ends before the code's last token.
   */
  overhang: boolean;
}

export const MAX_PATTERN_CHARS = 10_000;

function lineCol(text: string, index: number): string {
  const before = text.slice(0, index).split('\n');
  return `line ${before.length}, column ${before[before.length - 1].length + 1}`;
}

/** The first ERROR node (or, when `missingToo`, MISSING node the parser made up), if any. */
function firstError(node: Node, missingToo: boolean): Node | undefined {
  if (node.isError || (missingToo && node.isMissing)) return node;
  if (!node.hasError) return undefined;
  for (const child of node.children) {
    const found = child && firstError(child, missingToo);
    if (found) return found;
  }
  return undefined;
}

/** ast-grep descends through wrappers with one child (a module holding one statement holding one call...). */
function isSingle(node: Node): boolean {
  if (node.childCount === 1) return true;
  if (node.childCount !== 2) return false;
  const second = node.child(1);
  return !!second && (second.isMissing || second.type === '');
}

/**
 * Turns the parsed pattern into a PatternNode tree. `added` holds the offsets of `;` tokens
 * that were not in the pattern (see `terminateLoneMetavars`): they are left out, and a
 * statement that is a metavariable plus such a `;` is that metavariable.
 */
function convert(node: Node, sigil: string, added: ReadonlySet<number>): PatternNode {
  let text = node.text;
  if (text.endsWith(';') && added.has(node.endIndex - 1)) text = text.slice(0, -1).trimEnd();
  const metavar = parseMetaVar(text, sigil);
  if (metavar) return { kind: 'metavar', metavar };
  if (node.childCount === 0)
    return { kind: 'leaf', typeId: node.typeId, type: node.type, text: node.text, named: node.isNamed };
  const children: PatternNode[] = [];
  for (const child of node.children) {
    if (!child || child.isMissing || (child.type === ';' && added.has(child.startIndex))) continue;
    children.push(convert(child, sigil, added));
  }
  return { kind: 'inner', typeId: node.typeId, type: node.type, children };
}

/**
 * `{ $$$BODY }` is how a pattern says "any statements", but grammars that insist on a `;`
 * after an expression statement (Dart) do not parse a metavariable alone on its line. This
 * adds the `;` after such metavariables and returns where, so `convert` can leave it out.
 */
function terminateLoneMetavars(source: string, sigil: string): { text: string; added: number[] } {
  const s = sigil.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const lone = new RegExp(
    `(^|[{;\\n])([ \\t]*)(${s}${s}${s}[A-Z0-9_]*|${s}{1,2}[A-Z_][A-Z0-9_]*)(?=[ \\t]*(?:\\}|\\n|$))`,
    'g',
  );
  const added: number[] = [];
  let shift = 0;
  const text = source.replace(lone, (whole: string, before: string, space: string, name: string, at: number) => {
    added.push(at + shift + whole.length);
    shift++;
    return `${before}${space}${name};`;
  });
  return { text, added };
}

/**
 * Text every match must contain: named leaves are compared by text, so an identifier of the
 * pattern appears verbatim in each match; so do keyword and operator tokens (their kind is
 * their text). Metavariables contribute nothing.
 */
function collectLiterals(node: PatternNode, into: Set<string>): void {
  if (node.kind === 'leaf') {
    if (node.named && /^[A-Za-z_][A-Za-z0-9_]{2,}$/.test(node.text)) into.add(node.text);
    if (!node.named && node.text === node.type && node.text.length >= 2 && !/\s/.test(node.text)) into.add(node.text);
  }
  if (node.kind === 'inner') node.children.forEach((c) => collectLiterals(c, into));
}

/** The smallest node holding all of [start, end), as long as it stays inside [start, limit). */
function covering(root: Node, start: number, end: number, limit: number): Node | undefined {
  let node = root;
  for (;;) {
    const inner = node.children.find((c) => c && c.startIndex <= start && c.endIndex >= end);
    if (!inner) break;
    node = inner;
  }
  return node.startIndex >= start && node.endIndex <= limit ? node : undefined;
}

interface Parsed {
  tree: Tree;
  node?: Node;
  problem?: string;
  /** Where the pattern's own text ends in the parsed source (the context may add more). */
  end: number;
}

function parseIn(
  parser: Parser,
  source: string,
  context: PatternContext | undefined,
  pattern: string,
  language: LanguageSpec,
  strict: boolean,
): Parsed {
  const prefix = context?.prefix ?? '';
  // (`source` is the pattern as parsed; `pattern` only serves error positions.)
  const suffix = context?.suffix ?? '';
  const tree = parser.parse(prefix + source + suffix);
  if (!tree) throw new ToolError(`the ${language.id} parser gave up on the pattern`);
  const top = tree.rootNode;
  const problem = firstError(top, strict);
  if (problem) {
    const what = problem.text ? `cannot parse "${problem.text.slice(0, 40)}"` : 'incomplete code';
    const at = Math.max(0, Math.min(source.length, problem.startIndex - prefix.length));
    return { tree, problem: `pattern does not parse as ${language.id}: ${what} at ${lineCol(pattern, at)}`, end: 0 };
  }
  if (!context) {
    if (top.childCount === 0)
      return { tree, problem: 'pattern has no code in it (only comments or whitespace?)', end: 0 };
    if (!isSingle(top)) {
      return {
        tree,
        problem: `pattern is ${top.childCount} separate ${language.id} nodes; a pattern must be one node (wrap statements in a block, or search for one of them)`,
        end: 0,
      };
    }
    return { tree, node: top, end: top.endIndex };
  }
  const start = prefix.length;
  const end = start + source.length;
  const node = covering(top, start, end, end + suffix.length);
  if (!node) return { tree, problem: `pattern is more than one ${language.id} node`, end };
  return { tree, node, end };
}

type Attempt = { strict: boolean; context?: PatternContext; terminate?: boolean };

/**
 * Where to try parsing a pattern, in order. As ast-grep does, the pattern is first parsed on its
 * own, tolerating tokens the parser had to make up (so `Some($X)` needs no `;` in Rust); if that
 * fails, inside the language's contexts. Languages whose top level reads almost anything as a
 * declaration (Dart) try their contexts first.
 */
function parseAttempts(language: LanguageSpec): Attempt[] {
  const contexts = language.contexts ?? [];
  const inContexts = (strict: boolean, terminate = false) =>
    contexts.map((context) => ({ strict, context, terminate }));
  const terminated = [...inContexts(true, true), { strict: true, terminate: true }];
  // Dart also reads `{ $$$B }` as a set literal when a `;` follows; the terminated form says block.
  if (language.contextsFirst)
    return [...terminated, ...inContexts(true), { strict: true }, ...inContexts(false), { strict: false }];
  return [{ strict: false }, ...inContexts(true), ...inContexts(false), ...terminated];
}

export async function compilePattern(pattern: string, language: LanguageSpec): Promise<CompiledPattern> {
  if (typeof pattern !== 'string' || pattern.trim() === '') throw new ToolError('pattern is empty');
  if (pattern.length > MAX_PATTERN_CHARS)
    throw new ToolError(`pattern is ${pattern.length} characters; the limit is ${MAX_PATTERN_CHARS}`);
  const source = preprocessPattern(pattern.trim(), language.expando);
  const parser = await parserFor(language);
  let firstError: string | undefined;
  const attempts = parseAttempts(language);
  const terminated = terminateLoneMetavars(source, language.expando);
  for (const { strict, context, terminate } of attempts) {
    if (terminate && terminated.added.length === 0) continue;
    const text = terminate ? terminated.text : source;
    const parsed = parseIn(parser, text, context, pattern.trim(), language, strict);
    const prefixLength = context?.prefix.length ?? 0;
    const added = new Set(terminate ? terminated.added.map((at) => at + prefixLength) : []);
    try {
      if (!parsed.node) {
        firstError ??= parsed.problem;
        continue;
      }
      let node = parsed.node;
      while (isSingle(node)) node = node.child(0)!;
      const root = convert(node, language.expando, added);
      const literals = new Set<string>();
      collectLiterals(root, literals);
      return { language, root, literals: [...literals], overhang: node.endIndex > parsed.end };
    } finally {
      parsed.tree.delete();
    }
  }
  throw new ToolError(firstError ?? `pattern does not parse as ${language.id}`);
}
