import type { FlatTree, SyntaxNode as Node } from './flatTree';
import type { MetaVar } from './metavar';
import type { CompiledPattern, PatternNode } from './pattern';

/**
 * The structural matcher, following ast-grep's default ("smart") strictness:
 * every node of the pattern must be matched, while unnamed nodes of the code (optional
 * punctuation such as a trailing comma) and comments (the grammar's extras) may be skipped.
 *
 * A pattern node meets a code node in one of five ways (see `Step`); sibling lists are
 * walked by `matchSiblings`, which also handles `$$$` runs by looking ahead for the next
 * pattern node.
 */

/** Captures of one match. Repeated metavariables must capture equal code. */
export class Captures {
  readonly single = new Map<string, Node>();
  readonly multi = new Map<string, Node[]>();
  private readonly trail: { map: 'single' | 'multi'; name: string }[] = [];

  mark(): number {
    return this.trail.length;
  }

  /** Forgets bindings made after `mark` (a failed branch must not leave captures behind). */
  undo(mark: number): void {
    while (this.trail.length > mark) {
      const { map, name } = this.trail.pop()!;
      this[map].delete(name);
    }
  }

  bindSingle(name: string, node: Node): boolean {
    const prior = this.single.get(name);
    if (prior) return sameCode(prior, node);
    this.single.set(name, node);
    this.trail.push({ map: 'single', name });
    return true;
  }

  bindMulti(name: string, nodes: Node[]): boolean {
    const prior = this.multi.get(name);
    if (prior) return prior.length === nodes.length && prior.every((p, i) => sameCode(p, nodes[i]));
    this.multi.set(name, nodes);
    this.trail.push({ map: 'multi', name });
    return true;
  }
}

/** Two pieces of code are the same when their trees are, leaves compared by text. */
function sameCode(a: Node, b: Node): boolean {
  if (a.id === b.id && a.tree === b.tree) return true;
  if (a.childCount === 0 || b.childCount === 0) return a.text === b.text;
  if (a.typeId !== b.typeId || a.childCount !== b.childCount) return false;
  const ac = a.children;
  const bc = b.children;
  return ac.every((c, i) => sameCode(c!, bc[i]!));
}

enum Step {
  Matched,
  SkipCode,
  NoMatch,
}

/** Code the smart strictness may step over: unnamed tokens and extras such as comments. */
function skippable(code: Node): boolean {
  return !code.isNamed || code.isExtra;
}

function isEllipsis(
  p: PatternNode | undefined,
): p is { kind: 'metavar'; metavar: Extract<MetaVar, { kind: 'multi' | 'anyMulti' }> } {
  return p?.kind === 'metavar' && (p.metavar.kind === 'multi' || p.metavar.kind === 'anyMulti');
}

function isTrivial(p: PatternNode): boolean {
  return p.kind === 'leaf' && !p.named;
}

class Matcher {
  constructor(readonly caps: Captures) {}

  node(goal: PatternNode, code: Node): Step {
    switch (goal.kind) {
      case 'leaf':
        // Unnamed tokens are compared by kind only (some grammars give them odd spans).
        if (code.typeId === goal.typeId && (!goal.named || code.text === goal.text)) return Step.Matched;
        return skippable(code) ? Step.SkipCode : Step.NoMatch;
      case 'metavar':
        if (code.isExtra) return Step.SkipCode;
        return this.metavar(goal.metavar, code) ? Step.Matched : Step.NoMatch;
      case 'inner': {
        if (code.typeId !== goal.typeId) return code.isExtra ? Step.SkipCode : Step.NoMatch;
        const mark = this.caps.mark();
        if (this.siblings(goal.children, code.children as Node[])) return Step.Matched;
        this.caps.undo(mark);
        return Step.NoMatch;
      }
    }
  }

  metavar(mv: MetaVar, code: Node): boolean {
    switch (mv.kind) {
      case 'single':
        return (!mv.namedOnly || code.isNamed) && this.caps.bindSingle(mv.name, code);
      case 'dropped':
        return !mv.namedOnly || code.isNamed;
      case 'multi':
        return this.caps.bindMulti(mv.name, [code]);
      case 'anyMulti':
        return true;
    }
  }

  private bindRun(goal: PatternNode, run: Node[], skippedTrivia = 0): boolean {
    if (goal.kind !== 'metavar' || goal.metavar.kind !== 'multi') return true;
    // Pattern punctuation skipped after the run consumed code that stood for it; drop those.
    const kept = skippedTrivia > 0 ? run.slice(0, Math.max(0, run.length - skippedTrivia)) : run;
    return this.caps.bindMulti(goal.metavar.name, kept);
  }

  /** Matches a pattern's children against a code node's children. */
  siblings(goals: PatternNode[], codes: Node[]): boolean {
    let g = 0;
    let c = 0;
    if (codes.length === 0) return false;
    for (;;) {
      // 1. A `$$$` run: take code until the next pattern node matches.
      if (g >= goals.length) return true;
      let matchedAhead = false;
      if (isEllipsis(goals[g])) {
        const ellipsis = goals[g++];
        const run: Node[] = [];
        if (g >= goals.length) return this.bindRun(ellipsis, codes.slice(c));
        let skippedTrivia = 0;
        while (isTrivial(goals[g])) {
          g++;
          skippedTrivia++;
          if (g >= goals.length) return this.bindRun(ellipsis, codes.slice(c), skippedTrivia);
        }
        if (isEllipsis(goals[g])) {
          // Two runs in a row: the first takes exactly one node.
          run.push(codes[c++]);
          if (c >= codes.length || !this.bindRun(ellipsis, run, skippedTrivia)) return false;
          continue;
        }
        for (;;) {
          if (this.node(goals[g], codes[c]) === Step.Matched) {
            if (!this.bindRun(ellipsis, run, skippedTrivia)) return false;
            matchedAhead = true;
            break;
          }
          run.push(codes[c++]);
          if (c >= codes.length) return false;
        }
      }
      // 2. One pattern node, stepping over skippable code before it.
      while (!matchedAhead) {
        if (c >= codes.length) {
          // Code ran out: only `$$$` runs (which may be empty) can be left in the pattern.
          while (g < goals.length && isEllipsis(goals[g])) g++;
          if (g < goals.length) return false;
          break;
        }
        const step = this.node(goals[g], codes[c]);
        if (step === Step.Matched) break;
        if (step === Step.NoMatch) return false;
        c++;
      }
      if (g < goals.length) {
        g++;
        c++;
      }
      // 3. Pattern done: whatever code remains is trailing trivia the smart strictness ignores.
      if (g >= goals.length) return true;
      if (c >= codes.length) return false;
    }
  }
}

export interface Match {
  node: Node;
  /** The matched span: the node's, less a trailing token only the pattern's context supplied. */
  start: number;
  end: number;
  captures: Captures;
}

function matchEnd(pattern: CompiledPattern, node: Node): number {
  if (!pattern.overhang) return node.endIndex;
  const kids = node.children.filter((c): c is Node => !!c && !c.isExtra);
  const last = kids[kids.length - 1];
  return last && !last.isNamed && kids.length > 1 ? kids[kids.length - 2].endIndex : node.endIndex;
}

function found(pattern: CompiledPattern, node: Node, captures: Captures): Match {
  return { node, start: node.startIndex, end: matchEnd(pattern, node), captures };
}

/** Whether the pattern matches at this very node (not below it). */
export function matchAt(pattern: CompiledPattern, node: Node): Captures | undefined {
  const caps = new Captures();
  const matcher = new Matcher(caps);
  // A pattern that is only a metavariable matches comments too: they are skipped only as
  // trivia between the nodes of a larger pattern (as in ast-grep).
  if (pattern.root.kind === 'metavar') return matcher.metavar(pattern.root.metavar, node) ? caps : undefined;
  return matcher.node(pattern.root, node) === Step.Matched ? caps : undefined;
}

/**
 * Nodes of the pattern root's kind that enclose an occurrence of `literal`: every match
 * contains each literal, so climbing from the occurrences finds all candidates without
 * visiting the rest of the tree. Returned outer first, in document order.
 */
function enclosingCandidates(tree: FlatTree, source: string, literal: string, type: string): Node[] {
  const seen = new Set<number>();
  const found: { node: Node; depth: number }[] = [];
  for (let at = source.indexOf(literal); at >= 0; at = source.indexOf(literal, at + literal.length)) {
    const chain: Node[] = [];
    for (let n: Node | null = tree.descendantForIndex(at, at + literal.length); n; n = n.parent) {
      if (n.type === type && !seen.has(n.id)) {
        seen.add(n.id);
        chain.push(n);
      }
    }
    chain.reverse().forEach((node, depth) => found.push({ node, depth }));
  }
  found.sort((a, b) => a.node.startIndex - b.node.startIndex || b.node.endIndex - a.node.endIndex || a.depth - b.depth);
  return found.map((f) => f.node);
}

/** Whether [start, end) of source holds every literal. */
function holdsAll(source: string, literals: string[], start: number, end: number): boolean {
  return literals.every((l) => {
    const at = source.indexOf(l, start);
    return at >= 0 && at + l.length <= end;
  });
}

/** Every node of the tree the pattern matches, in document order, nested matches included. */
export function findAll(pattern: CompiledPattern, tree: FlatTree, source: string): Match[] {
  const out: Match[] = [];
  const root = pattern.root;
  const consider = (node: Node) => {
    if (pattern.literals.length > 0 && !holdsAll(source, pattern.literals, node.startIndex, node.endIndex)) return;
    const caps = matchAt(pattern, node);
    if (caps) out.push(found(pattern, node, caps));
  };
  if (root.kind !== 'metavar') {
    if (pattern.literals.length > 0) {
      // The rarest-looking literal (the longest) gives the fewest places to climb from.
      const literal = pattern.literals.reduce((a, b) => (b.length > a.length ? b : a));
      enclosingCandidates(tree, source, literal, root.type).forEach(consider);
      return out;
    }
    // Only nodes of the pattern root's kind can match.
    for (const node of tree.ofType(root.type)) consider(node);
    return out;
  }
  for (let i = 0; i < tree.nodeCount; i++) consider(tree.node(i));
  return out;
}
