import { parse, type Node as AcornNode } from 'acorn';

/**
 * Turns a JavaScript cell into a script that runs in the kernel's one global scope, as a
 * notebook expects: declarations outlive the cell and may be declared again by a later cell,
 * the last expression is the cell's value, and `await` works at the top level.
 *
 * Line numbers are kept: every rewrite stays on the lines of the text it replaces, so stack
 * traces point at the cell as the user wrote it.
 */
export interface PreparedCell {
  source: string;
  /** The script evaluates to a promise of `{ value }` (top-level await), not to the value itself. */
  async: boolean;
  /** The cell ends in an expression whose value is echoed. */
  echoes: boolean;
}

export class CellSyntaxError extends Error {
  constructor(
    message: string,
    readonly line: number,
    readonly column: number,
  ) {
    super(message);
    this.name = 'SyntaxError';
  }
}

type AnyNode = AcornNode & Record<string, any>;

interface Edit {
  start: number;
  end: number;
  text: string;
}

const FUNCTION_TYPES = new Set(['FunctionDeclaration', 'FunctionExpression', 'ArrowFunctionExpression']);

function isNode(x: unknown): x is AnyNode {
  return !!x && typeof x === 'object' && typeof (x as AnyNode).type === 'string';
}

/** Whether `await` (or `for await`) occurs outside every function of the cell. */
function hasTopLevelAwait(node: AnyNode): boolean {
  if (node.type === 'AwaitExpression' || (node.type === 'ForOfStatement' && node.await)) return true;
  if (FUNCTION_TYPES.has(node.type)) return false;
  for (const key of Object.keys(node)) {
    const v = node[key];
    if (Array.isArray(v)) {
      if (v.some((c) => isNode(c) && hasTopLevelAwait(c))) return true;
    } else if (isNode(v) && hasTopLevelAwait(v)) return true;
  }
  return false;
}

/** The names a binding pattern declares. */
function boundNames(pattern: AnyNode, into: string[] = []): string[] {
  switch (pattern.type) {
    case 'Identifier':
      into.push(pattern.name);
      break;
    case 'ObjectPattern':
      for (const p of pattern.properties) boundNames(p.type === 'RestElement' ? p.argument : p.value, into);
      break;
    case 'ArrayPattern':
      for (const e of pattern.elements) if (e) boundNames(e, into);
      break;
    case 'AssignmentPattern':
      boundNames(pattern.left, into);
      break;
    case 'RestElement':
      boundNames(pattern.argument, into);
      break;
  }
  return into;
}

function apply(code: string, edits: Edit[]): string {
  let out = code;
  for (const e of [...edits].sort((a, b) => b.start - a.start)) out = out.slice(0, e.start) + e.text + out.slice(e.end);
  return out;
}

export function prepareCell(code: string): PreparedCell {
  let program: AnyNode;
  try {
    program = parse(code, { ecmaVersion: 'latest', sourceType: 'script', allowAwaitOutsideFunction: true, locations: true }) as AnyNode;
  } catch (err) {
    const e = err as Error & { loc?: { line: number; column: number } };
    throw new CellSyntaxError(e.message, e.loc?.line ?? 1, e.loc?.column ?? 0);
  }
  const body: AnyNode[] = program.body;
  const last = body[body.length - 1];
  const echoes = !!last && last.type === 'ExpressionStatement' && !last.directive;
  const src = (n: AnyNode) => code.slice(n.start, n.end);
  const edits: Edit[] = [];

  if (!body.some(hasTopLevelAwait)) {
    // A plain script: its completion value is the echo. let/const/class become var-like so a
    // later cell may declare the same name again.
    for (const stmt of body) {
      if (stmt.type === 'VariableDeclaration' && stmt.kind !== 'var') edits.push({ start: stmt.start, end: stmt.start + stmt.kind.length, text: 'var' });
      if (stmt.type === 'ClassDeclaration') edits.push({ start: stmt.start, end: stmt.end, text: `var ${stmt.id.name} = ${src(stmt)};` });
    }
    return { source: apply(code, edits), async: false, echoes };
  }

  // Top-level await: the cell runs in an async function. Its declarations are hoisted to
  // globals (declared on line 1, before the wrapper) and become assignments inside it.
  const hoisted: string[] = [];
  for (const stmt of body) {
    if (stmt.type === 'VariableDeclaration') {
      const parts: string[] = [];
      for (const d of stmt.declarations) {
        hoisted.push(...boundNames(d.id));
        if (d.init) parts.push(`(${src(d.id)} = ${src(d.init)})`);
      }
      edits.push({ start: stmt.start, end: stmt.end, text: parts.length ? `${parts.join(', ')};` : ';' });
    } else if (stmt.type === 'FunctionDeclaration' || stmt.type === 'ClassDeclaration') {
      hoisted.push(stmt.id.name);
      edits.push({ start: stmt.start, end: stmt.end, text: `${stmt.id.name} = ${src(stmt)};` });
    }
  }
  if (echoes) edits.push({ start: last.start, end: last.end, text: `return { value: (${src(last.expression)}) };` });
  const declare = hoisted.length ? `var ${[...new Set(hoisted)].join(', ')}; ` : '';
  return { source: `${declare}(async () => { ${apply(code, edits)}\n})()`, async: true, echoes };
}
