import { promises as fs, statSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { findAllOnPath, findOnPath, isExecutable, pythonCanImport } from './executables';

export const ADAPTER_IDS = ['dart', 'debugpy', 'lldb', 'delve'] as const;
export type BuiltinAdapterId = (typeof ADAPTER_IDS)[number];
/** A built-in adapter's id, or one a template declares in debug.d. */
export type AdapterId = string;

/** How to start a resolved adapter. */
export interface AdapterCommand {
  command: string;
  args: string[];
  /** `stdio`: DAP on the adapter's stdin/stdout. `listen`: the adapter prints a port and speaks DAP there (dlv dap). */
  transport: 'stdio' | 'listen';
  env: NodeJS.ProcessEnv;
  /** What was found, in words. */
  detail: string;
  /** debugpy: the interpreter that runs the debuggee (a project-local venv's python when there is one). */
  interpreter?: string;
}

export type BinaryCheck = { ok: true; command: AdapterCommand } | { ok: false; missing: string };

export interface LaunchInput {
  program: string;
  args: string[];
  cwd: string;
  /** A private directory for build outputs (delve's binary), removed with the session. */
  scratchDir: string;
  command: AdapterCommand;
}

/**
 * The order of the DAP start-up. `launch-then-configure`: send launch, wait for the
 * `initialized` event, send breakpoints and configurationDone, then take the launch response
 * (debugpy answers launch only after configurationDone; lldb-dap and dlv answer before
 * `initialized`). `configure-then-launch`: `initialized` follows the initialize response, and
 * launch is sent once configuration is done (the Dart adapter).
 */
export type Handshake = 'launch-then-configure' | 'configure-then-launch';

export interface AdapterSpec {
  id: AdapterId;
  /** The DAP `adapterID` sent in initialize, when it is not the id. */
  adapterID?: string;
  /** The debug.d file that declared it; built-in adapters have none. */
  source?: string;
  /** The command as documented. */
  command: string;
  markers: readonly string[];
  /** Which programs this adapter debugs, in words (for "what was tried"). */
  handles: string;
  handshake: Handshake;
  /** `direct`: attach connects to the port itself, which already speaks DAP (a headless dlv). */
  attachVia: 'adapter' | 'direct';
  /** The DAP evaluate context: `repl` where it still means an expression, `watch` where `repl` would run debugger commands (lldb). */
  evaluateContext: 'repl' | 'watch';
  findBinary(projectRoot: string, workspaceRoot: string): Promise<BinaryCheck>;
  launchArguments(input: LaunchInput): Record<string, unknown>;
  attachArguments(port: number, command?: AdapterCommand): Record<string, unknown>;
}

const VENV_PYTHONS = ['.venv/bin/python', '.venv/bin/python3', 'venv/bin/python', 'venv/bin/python3'];

/** A project-local virtualenv's python: the project root's first, then the workspace root's. */
export async function localPython(projectRoot: string, workspaceRoot: string): Promise<string | undefined> {
  for (const root of [...new Set([projectRoot, workspaceRoot])]) {
    for (const rel of VENV_PYTHONS) {
      const candidate = path.join(root, rel);
      if (await isExecutable(candidate)) return candidate;
    }
  }
  return undefined;
}

const debugpy: AdapterSpec = {
  id: 'debugpy',
  command: 'python3 -m debugpy.adapter',
  markers: ['pyproject.toml', 'setup.py', 'requirements.txt'],
  handles: 'a .py file',
  handshake: 'launch-then-configure',
  // `python -m debugpy --listen` starts its own adapter on that port: attach talks to it directly.
  attachVia: 'direct',
  evaluateContext: 'repl',
  async findBinary(projectRoot, workspaceRoot) {
    const local = await localPython(projectRoot, workspaceRoot);
    const candidates = [...(local ? [local] : []), ...(await findAllOnPath('python3'))];
    const tried: string[] = [];
    for (const python of candidates) {
      if (await pythonCanImport(python, 'debugpy')) {
        const interpreter = local ?? python;
        const via = local && python !== local ? `; the adapter runs on ${python}` : '';
        return {
          ok: true,
          command: {
            command: python,
            args: ['-m', 'debugpy.adapter'],
            transport: 'stdio',
            env: { ...process.env, PYTHONUNBUFFERED: '1' },
            detail: `debuggee python ${interpreter}${local ? ' (project-local venv)' : ''}${via}`,
            interpreter,
          },
        };
      }
      tried.push(`${python} (no debugpy module)`);
    }
    return {
      ok: false,
      missing: candidates.length
        ? `no python with debugpy: tried ${tried.join(', ')}`
        : 'no python3 on PATH and no .venv/bin or venv/bin python',
    };
  },
  launchArguments: ({ program, args, cwd, command }) => ({
    name: 'tether',
    type: 'python',
    request: 'launch',
    program,
    args,
    cwd,
    python: [command.interpreter],
    console: 'internalConsole',
    justMyCode: true,
    // Child processes would arrive as separate sessions; one session per conversation.
    subProcess: false,
    stopOnEntry: false,
  }),
  attachArguments: (port) => ({
    name: 'tether',
    type: 'python',
    request: 'attach',
    connect: { host: '127.0.0.1', port },
    justMyCode: true,
    subProcess: false,
  }),
};

const LLDB_NAMES = ['lldb-dap', 'lldb-dap-19'];

const lldb: AdapterSpec = {
  id: 'lldb',
  command: 'lldb-dap',
  markers: ['Cargo.toml', 'CMakeLists.txt'],
  handles: 'an ELF executable built with debug info',
  handshake: 'launch-then-configure',
  attachVia: 'adapter',
  evaluateContext: 'watch',
  async findBinary() {
    for (const name of LLDB_NAMES) {
      const found = await findOnPath(name);
      if (found)
        return { ok: true, command: { command: found, args: [], transport: 'stdio', env: process.env, detail: found } };
    }
    return { ok: false, missing: `none of ${LLDB_NAMES.join(', ')} on PATH` };
  },
  launchArguments: ({ program, args, cwd }) => ({
    program,
    args,
    cwd,
    stopOnEntry: false,
    // Turning ASLR off needs personality(2), which container seccomp profiles refuse; the
    // launch flag alone is not enough, lldb's target setting turns it back on.
    disableASLR: false,
    initCommands: ['settings set target.disable-aslr false'],
  }),
  attachArguments: (port) => ({ 'gdb-remote-port': port, 'gdb-remote-hostname': '127.0.0.1' }),
};

/** Go needs writable caches; a read-only home in the container has none. */
function goEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  env.GOCACHE ??= path.join(os.tmpdir(), 'tether-go-cache');
  env.GOPATH ??= path.join(os.tmpdir(), 'tether-go');
  // Nothing may be fetched from a sandbox: fail fast instead of waiting on the network.
  env.GOPROXY ??= 'off';
  return env;
}

const delve: AdapterSpec = {
  id: 'delve',
  command: 'dlv dap',
  markers: ['go.mod'],
  handles: 'a .go file or a Go package directory',
  handshake: 'launch-then-configure',
  attachVia: 'direct',
  evaluateContext: 'repl',
  async findBinary() {
    const found = await findOnPath('dlv');
    if (!found) return { ok: false, missing: 'dlv not on PATH' };
    return {
      ok: true,
      command: {
        command: found,
        args: ['dap', '--listen', '127.0.0.1:0'],
        transport: 'listen',
        env: goEnv(),
        detail: found,
      },
    };
  },
  launchArguments: ({ program, args, cwd, scratchDir }) => ({
    request: 'launch',
    // Source (a .go file or a package folder) is built first; a built binary is run as it is.
    mode: program.endsWith('.go') || (!path.extname(program) && isDirectorySync(program)) ? 'debug' : 'exec',
    program,
    args,
    cwd,
    // The built binary goes to a scratch directory, not into the workspace.
    output: path.join(scratchDir, 'debug-bin'),
  }),
  attachArguments: () => ({ request: 'attach', mode: 'remote' }),
};

const dart: AdapterSpec = {
  id: 'dart',
  command: 'dart debug_adapter',
  markers: ['pubspec.yaml'],
  handles: 'a .dart file',
  handshake: 'configure-then-launch',
  attachVia: 'adapter',
  evaluateContext: 'repl',
  async findBinary() {
    const found = await findOnPath('dart');
    if (!found) return { ok: false, missing: 'dart not on PATH (the Dart SDK is not installed)' };
    return {
      ok: true,
      command: { command: found, args: ['debug_adapter'], transport: 'stdio', env: process.env, detail: found },
    };
  },
  launchArguments: ({ program, args, cwd }) => ({ program, args, cwd }),
  attachArguments: (port) => ({ vmServiceUri: `ws://127.0.0.1:${port}/ws` }),
};

export const ADAPTERS: Record<BuiltinAdapterId, AdapterSpec> = { dart, debugpy, lldb, delve };

function isDirectorySync(p: string): boolean {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
}

const ELF_MAGIC = Buffer.from([0x7f, 0x45, 0x4c, 0x46]);

/**
 * The adapters that could debug this program, judged from the program itself, best first
 * (empty when none). A native binary may be C/C++/Rust (lldb) or Go (delve): the root markers
 * decide between them.
 */
export async function adaptersForProgram(absProgram: string): Promise<BuiltinAdapterId[]> {
  const st = await fs.stat(absProgram);
  if (st.isDirectory()) {
    const entries = await fs.readdir(absProgram);
    return entries.some((e) => e.endsWith('.go')) ? ['delve'] : [];
  }
  switch (path.extname(absProgram)) {
    case '.py':
      return ['debugpy'];
    case '.go':
      return ['delve'];
    case '.dart':
      return ['dart'];
  }
  const fh = await fs.open(absProgram, 'r');
  try {
    const head = Buffer.alloc(128);
    const { bytesRead } = await fh.read(head, 0, head.length, 0);
    if (head.subarray(0, 4).equals(ELF_MAGIC)) return ['lldb', 'delve'];
    const firstLine = head.subarray(0, bytesRead).toString('latin1').split('\n')[0];
    return firstLine.startsWith('#!') && /python/.test(firstLine) ? ['debugpy'] : [];
  } finally {
    await fh.close();
  }
}
