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

// biome-ignore lint/suspicious/noExplicitAny: acorn's nodes carry per-type fields its types do not declare
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

function parseScript(code: string): AnyNode {
  return parse(code, {
    ecmaVersion: 'latest',
    sourceType: 'script',
    allowAwaitOutsideFunction: true,
    locations: true,
  }) as AnyNode;
}

/**
 * Static `import` statements, typed by reflex, become dynamic imports a script can run:
 * `import x, { a as b } from "m"` → `const { default: x, a: b } = await import("m")`.
 */
function importsToDynamic(code: string): string | undefined {
  let program: AnyNode;
  try {
    program = parse(code, { ecmaVersion: 'latest', sourceType: 'module', allowAwaitOutsideFunction: true }) as AnyNode;
  } catch {
    return undefined;
  }
  const edits: Edit[] = [];
  for (const stmt of program.body as AnyNode[]) {
    if (
      stmt.type === 'ExportNamedDeclaration' ||
      stmt.type === 'ExportDefaultDeclaration' ||
      stmt.type === 'ExportAllDeclaration'
    )
      return undefined;
    if (stmt.type !== 'ImportDeclaration') continue;
    const from = `await import(${code.slice(stmt.source.start, stmt.source.end)})`;
    const names: string[] = [];
    let namespace: string | undefined;
    for (const spec of stmt.specifiers as AnyNode[]) {
      if (spec.type === 'ImportNamespaceSpecifier') namespace = spec.local.name;
      else if (spec.type === 'ImportDefaultSpecifier') names.push(`default: ${spec.local.name}`);
      else {
        const imported = spec.imported.type === 'Identifier' ? spec.imported.name : JSON.stringify(spec.imported.value);
        names.push(imported === spec.local.name ? imported : `${imported}: ${spec.local.name}`);
      }
    }
    const parts: string[] = [];
    if (namespace) parts.push(`const ${namespace} = ${from};`);
    if (names.length) parts.push(`const { ${names.join(', ')} } = ${namespace ?? from};`);
    if (!parts.length) parts.push(`${from};`);
    edits.push({ start: stmt.start, end: stmt.end, text: parts.join(' ') });
  }
  return edits.length ? apply(code, edits) : undefined;
}

export function prepareCell(source: string): PreparedCell {
  let code = source;
  let program: AnyNode;
  try {
    program = parseScript(code);
  } catch (err) {
    const rewritten = importsToDynamic(code);
    if (rewritten !== undefined) {
      code = rewritten;
      program = parseScript(code);
    } else {
      const e = err as Error & { loc?: { line: number; column: number } };
      const hint = /'import' and 'export'/.test(e.message)
        ? ' (a cell is a script: use require() or await import())'
        : '';
      throw new CellSyntaxError(e.message + hint, e.loc?.line ?? 1, e.loc?.column ?? 0);
    }
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
      if (stmt.type === 'VariableDeclaration' && stmt.kind !== 'var')
        edits.push({ start: stmt.start, end: stmt.start + stmt.kind.length, text: 'var' });
      if (stmt.type === 'ClassDeclaration')
        edits.push({ start: stmt.start, end: stmt.end, text: `var ${stmt.id.name} = ${src(stmt)};` });
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
