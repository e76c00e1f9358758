import { Type, type Static } from '@sinclair/typebox';
import { readDeclarations } from '../../util/declarations';
import type { AdapterSpec } from './adapters';
import { findOnPath, isExecutable } from './executables';

/**
 * Where a runner template declares the debug adapters it carries, as languages.d declares
 * language servers: one JSON file per adapter (an object, or an array of them), read once
 * when the runner starts. A template adds a debugger by installing it and dropping a file here.
 */
export const DEBUG_ADAPTERS_DIR = process.env.TETHER_DEBUG_ADAPTERS_DIR ?? '/etc/tether/debug.d';

const Config = Type.Record(Type.String({ maxLength: 100 }), Type.Unknown());

const AdapterEntry = Type.Object(
  {
    id: Type.String({ pattern: '^[a-z0-9][a-z0-9_.-]{0,62}$' }),
    languages: Type.String({ minLength: 1, maxLength: 200 }),
    /** Program file extensions (with the dot) this adapter debugs. */
    extensions: Type.Array(Type.String({ pattern: '^\\.[A-Za-z0-9_+-]{1,16}$' }), { minItems: 1 }),
    rootMarkers: Type.Array(Type.String({ minLength: 1, maxLength: 200 }), { minItems: 1 }),
    command: Type.String({ minLength: 1, maxLength: 500 }),
    args: Type.Optional(Type.Array(Type.String({ maxLength: 1000 }))),
    env: Type.Optional(Type.Record(Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_]*$' }), Type.String())),
    /** The DAP `adapterID` sent in initialize; the id when left out. */
    adapterID: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    handshake: Type.Optional(
      Type.Union([Type.Literal('launch-then-configure'), Type.Literal('configure-then-launch')]),
    ),
    evaluateContext: Type.Optional(Type.Union([Type.Literal('repl'), Type.Literal('watch')])),
    /** Launch arguments; `program`, `args` and `cwd` are set by the launch itself. */
    launch: Type.Optional(Config),
    /** Attach arguments, `${port}` standing for the port (as a number where it is the whole value); no attach when left out. */
    attach: Type.Optional(Config),
  },
  { additionalProperties: false },
);
export type AdapterEntry = Static<typeof AdapterEntry>;

/** A declared adapter: an AdapterSpec plus where it came from and what it debugs by extension. */
export interface DeclaredAdapter extends AdapterSpec {
  source: string;
  extensions: readonly string[];
}

/** The placeholder of the port in declared attach arguments (a literal, not a template string). */
const PORT = '$' + '{port}';

/** `${port}` in attach arguments: the port number where it is the whole string, else spliced in. */
function withPort(value: unknown, port: number): unknown {
  if (typeof value === 'string') return value === PORT ? port : value.replaceAll(PORT, String(port));
  if (Array.isArray(value)) return value.map((v) => withPort(v, port));
  if (value && typeof value === 'object')
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, withPort(v, port)]));
  return value;
}

function specOf(entry: AdapterEntry, source: string): DeclaredAdapter {
  const args = entry.args ?? [];
  return {
    id: entry.id,
    adapterID: entry.adapterID ?? entry.id,
    command: [entry.command, ...args].join(' '),
    markers: entry.rootMarkers,
    handles: `${entry.languages}: ${entry.extensions.join(', ')}`,
    handshake: entry.handshake ?? 'launch-then-configure',
    attachVia: 'adapter',
    evaluateContext: entry.evaluateContext ?? 'repl',
    source,
    extensions: entry.extensions,
    async findBinary() {
      const found = entry.command.includes('/')
        ? (await isExecutable(entry.command))
          ? entry.command
          : undefined
        : await findOnPath(entry.command);
      if (!found) return { ok: false, missing: `${entry.command} not found` };
      return {
        ok: true,
        command: {
          command: found,
          args,
          transport: 'stdio',
          env: { ...process.env, ...entry.env },
          detail: `${found}; declared in ${source}`,
        },
      };
    },
    launchArguments: ({ program, args: programArgs, cwd }) => ({
      name: 'tether',
      request: 'launch',
      ...entry.launch,
      program,
      args: programArgs,
      cwd,
    }),
    attachArguments: (port) => {
      if (!entry.attach) throw new Error(`the ${entry.id} adapter declares no attach arguments (${source})`);
      return { name: 'tether', request: 'attach', ...(withPort(entry.attach, port) as Record<string, unknown>) };
    },
  };
}

export interface DeclaredAdapters {
  adapters: DeclaredAdapter[];
  /** Files that could not be used, and why: shown by `debug adapters`. */
  problems: string[];
}

export function loadDeclaredAdapters(dir = DEBUG_ADAPTERS_DIR): DeclaredAdapters {
  const { entries, problems } = readDeclarations(dir, AdapterEntry, 'adapter');
  return { adapters: entries.map(({ entry, file }) => specOf(entry, file)), problems };
}
