/** What tether knows about one language server: which files, which roots, which binary. */
export interface ServerSpec {
  id: string;
  /** Human name of the languages served. */
  languages: string;
  /** File extensions (with dot) this server answers for, mapped to the LSP languageId. */
  extensions: Record<string, string>;
  /** A directory holding any of these is a root for this server. */
  rootMarkers: string[];
  /**
   * Where a file with no marker above it is served from: nowhere (default: the server needs
   * its project), or the workspace root, for servers that answer file by file (YAML, CSS, …).
   */
  rootFallback?: 'workspace';
  /** Executable name, looked up project-local first, then on $PATH. */
  command: string;
  args: string[];
  /** Sent as initializationOptions. */
  initializationOptions?: unknown;
  /** Answers to the server's workspace/configuration requests, by section. */
  settings?: Record<string, unknown>;
  /** Extra fields of every didChange (server extensions). */
  didChangeExtras?: Record<string, unknown>;
  /**
   * How a file's diagnostics are obtained: awaited pushes (default), pushes that carry the
   * document version (unversioned ones, e.g. for a file before it was opened, are ignored),
   * asked (LSP pull) of a server that answers pulls without advertising them (Volar's, whose
   * pushes come in two rounds, the first one empty), or asked of tsserver. A server that
   * advertises pulls is always asked.
   */
  diagnostics?: 'push' | 'versioned-push' | 'pull' | 'tsserver-pull';
  /** The languages.d file that declared this server; absent for a built-in one. */
  source?: string;
}

export const SERVERS: ServerSpec[] = [
  {
    id: 'typescript',
    languages: 'TypeScript, JavaScript',
    extensions: {
      '.ts': 'typescript',
      '.tsx': 'typescriptreact',
      '.mts': 'typescript',
      '.cts': 'typescript',
      '.js': 'javascript',
      '.jsx': 'javascriptreact',
      '.mjs': 'javascript',
      '.cjs': 'javascript',
    },
    rootMarkers: ['tsconfig.json', 'jsconfig.json', 'package.json'],
    command: 'typescript-language-server',
    args: ['--stdio'],
    // The syntax-only server answers while the project loads, with definitions that stop at
    // the import; one semantic server gives right answers a little later instead.
    initializationOptions: { tsserver: { useSyntaxServer: 'never' } },
    diagnostics: 'tsserver-pull',
  },
  {
    id: 'pyright',
    languages: 'Python',
    extensions: { '.py': 'python', '.pyi': 'python' },
    rootMarkers: ['pyrightconfig.json', 'pyproject.toml', 'setup.py', 'setup.cfg', 'requirements.txt'],
    command: 'pyright-langserver',
    diagnostics: 'versioned-push',
    args: ['--stdio'],
  },
  {
    id: 'clangd',
    languages: 'C, C++',
    extensions: { '.c': 'c', '.h': 'c', '.cc': 'cpp', '.cpp': 'cpp', '.cxx': 'cpp', '.hpp': 'cpp', '.hh': 'cpp' },
    rootMarkers: ['compile_commands.json', 'compile_flags.txt', '.clangd', 'CMakeLists.txt', 'Makefile'],
    command: 'clangd',
    diagnostics: 'versioned-push',
    // The background index would write .cache/clangd into the workspace; without it clangd
    // still indexes every open file and its headers.
    args: ['--background-index=false', '--log=error'],
    // clangd's extension: diagnostics for this version now, instead of after its debounce.
    didChangeExtras: { wantDiagnostics: true },
  },
  {
    id: 'gopls',
    languages: 'Go',
    extensions: { '.go': 'go' },
    rootMarkers: ['go.work', 'go.mod'],
    command: 'gopls',
    diagnostics: 'versioned-push',
    args: [],
    // gopls holds diagnostics back 250 ms to batch keystrokes; a tool write is one deliberate save.
    settings: { gopls: { diagnosticsDelay: '0s' } },
  },
  {
    id: 'rust-analyzer',
    languages: 'Rust',
    extensions: { '.rs': 'rust' },
    rootMarkers: ['Cargo.toml'],
    command: 'rust-analyzer',
    args: [],
  },
  {
    id: 'dart',
    languages: 'Dart',
    extensions: { '.dart': 'dart' },
    rootMarkers: ['pubspec.yaml'],
    command: 'dart',
    args: ['language-server', '--protocol=lsp'],
  },
];

export function serverForExtension(ext: string, servers: ServerSpec[] = SERVERS): ServerSpec | undefined {
  return servers.find((s) => Object.hasOwn(s.extensions, ext.toLowerCase()));
}
