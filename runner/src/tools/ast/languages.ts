import * as path from 'node:path';
import { Language, Parser } from 'web-tree-sitter';
import { ToolError } from '../../tool';
import { moduleFor, type WasmModule, wasmApi } from './wasmModules';

/**
 * One grammar: its id (ast-grep's id where ast-grep has the language), the file extensions
 * it owns, and the character that stands in for `$` while a pattern is parsed. Where `$`
 * cannot start an identifier, ast-grep substitutes a character the grammar accepts in
 * identifiers (its "expando" character); we use the same ones so patterns mean the same.
 */
export interface LanguageSpec {
  id: string;
  wasm: string;
  extensions: string[];
  expando: string;
  /**
   * Code to wrap a pattern in when it does not parse on its own (Dart, for one, allows only
   * declarations at the top level, so a statement or an expression needs a function around it).
   */
  contexts?: PatternContext[];
  /** Try the contexts before the pattern on its own (its top level would misread statements). */
  contextsFirst?: boolean;
}

export interface PatternContext {
  prefix: string;
  suffix: string;
}

/** A pattern as it stands, with a `;` after it, then as a statement (with and without `;`) inside a function body. */
function statementContexts(open: string, close: string): PatternContext[] {
  return [
    { prefix: '', suffix: ';' },
    { prefix: `${open}\n`, suffix: `\n${close}` },
    { prefix: `${open}\n`, suffix: `;\n${close}` },
  ];
}

// tree-sitter-wasms also carries elm, ql and yaml, but those grammars do not load in
// web-tree-sitter 0.25 (ABI 10/12, or a missing external scanner symbol), so they are not offered.
const SPECS: LanguageSpec[] = [
  { id: 'bash', wasm: 'bash', extensions: ['sh', 'bash'], expando: '$' },
  {
    id: 'c',
    wasm: 'c',
    extensions: ['c', 'h'],
    expando: 'µ',
    contexts: statementContexts('void __tether_pattern(void) {', '}'),
  },
  {
    id: 'cpp',
    wasm: 'cpp',
    extensions: ['cc', 'cpp', 'cxx', 'hpp', 'hh', 'hxx'],
    expando: 'µ',
    contexts: statementContexts('void __tether_pattern() {', '}'),
  },
  { id: 'csharp', wasm: 'c_sharp', extensions: ['cs'], expando: 'µ' },
  { id: 'css', wasm: 'css', extensions: ['css'], expando: '_' },
  {
    id: 'dart',
    wasm: 'dart',
    extensions: ['dart'],
    expando: '$',
    contextsFirst: true,
    contexts: [
      ...statementContexts('void __tether_pattern() {', '}').slice(1),
      { prefix: 'var __tether_pattern = ', suffix: ';' },
      { prefix: 'class __TetherPattern {\n', suffix: '\n}' },
    ],
  },
  { id: 'elisp', wasm: 'elisp', extensions: ['el'], expando: 'µ' },
  { id: 'elixir', wasm: 'elixir', extensions: ['ex', 'exs'], expando: 'µ' },
  { id: 'embedded_template', wasm: 'embedded_template', extensions: ['erb', 'ejs'], expando: '$' },
  {
    id: 'go',
    wasm: 'go',
    extensions: ['go'],
    expando: 'µ',
    contexts: statementContexts('func __tether_pattern() {', '}'),
  },
  { id: 'html', wasm: 'html', extensions: ['html', 'htm'], expando: 'z' },
  {
    id: 'java',
    wasm: 'java',
    extensions: ['java'],
    expando: '$',
    contexts: statementContexts('class __TetherPattern { void m() {', '} }'),
  },
  { id: 'javascript', wasm: 'javascript', extensions: ['js', 'mjs', 'cjs', 'jsx'], expando: '$' },
  { id: 'json', wasm: 'json', extensions: ['json'], expando: '$' },
  { id: 'kotlin', wasm: 'kotlin', extensions: ['kt', 'kts'], expando: 'µ' },
  { id: 'lua', wasm: 'lua', extensions: ['lua'], expando: '$' },
  { id: 'objc', wasm: 'objc', extensions: ['m'], expando: 'µ' },
  { id: 'ocaml', wasm: 'ocaml', extensions: ['ml', 'mli'], expando: 'µ' },
  { id: 'php', wasm: 'php', extensions: ['php'], expando: 'µ' },
  { id: 'python', wasm: 'python', extensions: ['py', 'pyi'], expando: 'µ' },
  { id: 'rescript', wasm: 'rescript', extensions: ['res', 'resi'], expando: 'µ' },
  { id: 'ruby', wasm: 'ruby', extensions: ['rb'], expando: 'µ' },
  {
    id: 'rust',
    wasm: 'rust',
    extensions: ['rs'],
    expando: 'µ',
    contexts: statementContexts('fn __tether_pattern() {', '}'),
  },
  { id: 'scala', wasm: 'scala', extensions: ['scala', 'sc'], expando: '$' },
  { id: 'solidity', wasm: 'solidity', extensions: ['sol'], expando: 'µ' },
  { id: 'swift', wasm: 'swift', extensions: ['swift'], expando: 'µ' },
  { id: 'systemrdl', wasm: 'systemrdl', extensions: ['rdl'], expando: 'µ' },
  { id: 'tlaplus', wasm: 'tlaplus', extensions: ['tla'], expando: 'µ' },
  { id: 'toml', wasm: 'toml', extensions: ['toml'], expando: 'µ' },
  { id: 'tsx', wasm: 'tsx', extensions: ['tsx'], expando: '$' },
  { id: 'typescript', wasm: 'typescript', extensions: ['ts', 'mts', 'cts'], expando: '$' },
  { id: 'vue', wasm: 'vue', extensions: ['vue'], expando: '$' },
  { id: 'zig', wasm: 'zig', extensions: ['zig'], expando: 'µ' },
];

/** Other names people use for a language, mapped to its id. */
const ALIASES: Record<string, string> = {
  py: 'python',
  ts: 'typescript',
  js: 'javascript',
  jsx: 'javascript',
  rs: 'rust',
  golang: 'go',
  'c++': 'cpp',
  cs: 'csharp',
  'c#': 'csharp',
  c_sharp: 'csharp',
  kt: 'kotlin',
  rb: 'ruby',
  sh: 'bash',
};

const byId = new Map(SPECS.map((s) => [s.id, s]));
const byExtension = new Map(SPECS.flatMap((s) => s.extensions.map((e) => [e, s] as const)));

export const LANGUAGE_IDS: readonly string[] = SPECS.map((s) => s.id);

export function languageById(id: string): LanguageSpec {
  const key = id.trim().toLowerCase();
  const spec = byId.get(ALIASES[key] ?? key);
  if (!spec) throw new ToolError(`unknown language "${id}"; supported: ${LANGUAGE_IDS.join(', ')}`);
  return spec;
}

export function languageForFile(file: string): LanguageSpec | undefined {
  const ext = path.extname(file).slice(1).toLowerCase();
  return ext ? byExtension.get(ext) : undefined;
}

/**
 * The tree-sitter WebAssembly module's raw exports. Emscripten fills the options object given
 * to Parser.init with them; flatTree.ts calls a few directly, which skips web-tree-sitter's
 * per-call copying of a cursor in and out of WebAssembly memory.
 */
export interface WasmBinding {
  HEAP32: Int32Array;
  loadWebAssemblyModule(binary: Uint8Array | WasmModule, ...rest: unknown[]): unknown;
  _ts_init(): number;
  _ts_tree_cursor_goto_first_child_wasm(tree: number): number;
  _ts_tree_cursor_goto_next_sibling_wasm(tree: number): number;
  _ts_tree_cursor_goto_parent_wasm(tree: number): number;
  _ts_tree_cursor_current_node_type_id_wasm(tree: number): number;
  _ts_tree_cursor_current_node_is_missing_wasm(tree: number): number;
  _ts_tree_cursor_current_node_wasm(tree: number): void;
  _ts_tree_cursor_start_index_wasm(tree: number): number;
  _ts_tree_cursor_end_index_wasm(tree: number): number;
  _ts_node_is_extra_wasm(tree: number): number;
}

const RUNTIME_WASM = path.join(path.dirname(require.resolve('web-tree-sitter')), 'tree-sitter.wasm');

/**
 * Module options for Parser.init: the runtime is instantiated from the process's shared
 * compiled module (see wasmModules.ts) instead of being compiled again in this thread.
 */
const binding: Partial<WasmBinding> & Record<string, unknown> = {
  instantiateWasm(imports: unknown, done: (instance: unknown, module: WasmModule) => void) {
    void moduleFor(RUNTIME_WASM).then((module) => done(new wasmApi.Instance(module, imports), module));
    return {};
  },
};
let init: Promise<void> | undefined;

/** Stand-ins given to Language.load (it takes bytes or a path), each for a compiled grammar. */
const standIns = new WeakMap<Uint8Array, WasmModule>();

async function startRuntime(): Promise<void> {
  await moduleFor(RUNTIME_WASM); // fails here, clearly, rather than inside Emscripten
  await Parser.init(binding as Parameters<typeof Parser.init>[0]);
  // Language.load hands its bytes to this export, which also takes a compiled module.
  const load = binding.loadWebAssemblyModule!.bind(binding);
  binding.loadWebAssemblyModule = (binary, ...rest) =>
    load(binary instanceof Uint8Array ? (standIns.get(binary) ?? binary) : binary, ...rest);
}

async function loadGrammar(spec: LanguageSpec): Promise<Language> {
  const standIn = new Uint8Array(0);
  standIns.set(standIn, await moduleFor(wasmPath(spec)));
  return Language.load(standIn);
}

/** The raw exports (after Parser.init, so once any grammar has loaded). */
export function wasmBinding(): WasmBinding {
  const b = binding as Record<string, unknown>;
  const missing = RAW_EXPORTS.filter((name) => typeof b[name] !== 'function');
  if (!(b.HEAP32 instanceof Int32Array) || missing.length > 0)
    throw new Error(`web-tree-sitter lacks what the tree copy calls: ${missing.join(', ') || 'HEAP32'}`);
  return binding as WasmBinding;
}

const RAW_EXPORTS = [
  'loadWebAssemblyModule',
  '_ts_init',
  '_ts_tree_cursor_goto_first_child_wasm',
  '_ts_tree_cursor_goto_next_sibling_wasm',
  '_ts_tree_cursor_goto_parent_wasm',
  '_ts_tree_cursor_current_node_type_id_wasm',
  '_ts_tree_cursor_current_node_is_missing_wasm',
  '_ts_tree_cursor_current_node_wasm',
  '_ts_tree_cursor_start_index_wasm',
  '_ts_tree_cursor_end_index_wasm',
  '_ts_node_is_extra_wasm',
];
const loaded = new Map<string, Promise<Language>>();
const parsers = new Map<string, Parser>();

function wasmPath(spec: LanguageSpec): string {
  return require.resolve(`tree-sitter-wasms/out/tree-sitter-${spec.wasm}.wasm`);
}

/** Loads a grammar once per process; later calls share it. */
export async function loadLanguage(spec: LanguageSpec): Promise<Language> {
  init ??= startRuntime();
  await init;
  let lang = loaded.get(spec.id);
  if (!lang) {
    lang = loadGrammar(spec);
    loaded.set(spec.id, lang);
    lang.catch(() => loaded.delete(spec.id));
  }
  try {
    return await lang;
  } catch (err) {
    throw new ToolError(`the ${spec.id} grammar failed to load: ${(err as Error).message}`);
  }
}

/** A parser bound to the language (one per language: parsing is synchronous, so sharing is safe). */
export async function parserFor(spec: LanguageSpec): Promise<Parser> {
  const language = await loadLanguage(spec);
  let parser = parsers.get(spec.id);
  if (!parser) {
    parser = new Parser();
    parser.setLanguage(language);
    parsers.set(spec.id, parser);
  }
  return parser;
}
