import { Type, type Static } from '@sinclair/typebox';
import { readDeclarations } from '../../util/declarations';
import { SERVERS, type ServerSpec } from './servers';

/**
 * Where a runner template declares the language servers it carries: one JSON file per
 * language (an object, or an array of them), read once when the runner starts. A template
 * adds a language by installing the server and dropping a file here; no runner code changes.
 */
export const LANGUAGES_DIR = process.env.TETHER_LANGUAGES_DIR ?? '/etc/tether/languages.d';

const LanguageEntry = Type.Object(
  {
    id: Type.String({ pattern: '^[a-z0-9][a-z0-9_.-]{0,62}$' }),
    languages: Type.String({ minLength: 1, maxLength: 200 }),
    extensions: Type.Record(
      Type.String({ pattern: '^\\.[A-Za-z0-9_+-]{1,16}$' }),
      Type.String({ minLength: 1, maxLength: 64 }),
      { minProperties: 1 },
    ),
    rootMarkers: Type.Array(Type.String({ minLength: 1, maxLength: 200 }), { minItems: 1 }),
    rootFallback: Type.Optional(Type.Literal('workspace')),
    command: Type.String({ minLength: 1, maxLength: 500 }),
    args: Type.Optional(Type.Array(Type.String({ maxLength: 1000 }))),
    initializationOptions: Type.Optional(Type.Unknown()),
    settings: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
    diagnostics: Type.Optional(
      Type.Union([Type.Literal('push'), Type.Literal('versioned-push'), Type.Literal('pull')]),
    ),
  },
  { additionalProperties: false },
);
export type LanguageEntry = Static<typeof LanguageEntry>;

export interface LanguageTable {
  servers: ServerSpec[];
  /** Files that could not be used, and why: shown by `lsp status`. */
  problems: string[];
}

/**
 * The built-in servers plus those a template declares. A declared server comes first, so it
 * wins an extension over a built-in one; one with a built-in id replaces it.
 */
export function loadLanguages(dir = LANGUAGES_DIR, builtIn: ServerSpec[] = SERVERS): LanguageTable {
  const { entries, problems } = readDeclarations(dir, LanguageEntry, 'server');
  const declared: ServerSpec[] = entries.map(({ entry, file }) => ({ ...entry, args: entry.args ?? [], source: file }));
  const ids = new Set(declared.map((d) => d.id));
  return { servers: [...declared, ...builtIn.filter((b) => !ids.has(b.id))], problems };
}

let table: LanguageTable | undefined;

/** The table this runner uses, read on first use. */
export function activeLanguages(): LanguageTable {
  table ??= loadLanguages();
  return table;
}
