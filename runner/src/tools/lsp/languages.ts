import { readdirSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
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
    command: Type.String({ minLength: 1, maxLength: 500 }),
    args: Type.Optional(Type.Array(Type.String({ maxLength: 1000 }))),
    initializationOptions: Type.Optional(Type.Unknown()),
    settings: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
    diagnostics: Type.Optional(Type.Union([Type.Literal('push'), Type.Literal('versioned-push')])),
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
  let names: string[];
  try {
    names = readdirSync(dir)
      .filter((n) => n.endsWith('.json'))
      .sort();
  } catch {
    return { servers: builtIn, problems: [] };
  }
  const declared: ServerSpec[] = [];
  const problems: string[] = [];
  for (const name of names) {
    const file = path.join(dir, name);
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(file, 'utf8'));
    } catch (err) {
      problems.push(`${file}: not readable JSON (${(err as Error).message})`);
      continue;
    }
    for (const [i, entry] of (Array.isArray(parsed) ? parsed : [parsed]).entries()) {
      const where = Array.isArray(parsed) ? `${file}[${i}]` : file;
      if (!Value.Check(LanguageEntry, entry)) {
        const first = [...Value.Errors(LanguageEntry, entry)][0];
        problems.push(`${where}: ${first ? `${first.path || '/'} ${first.message}` : 'invalid'}`);
        continue;
      }
      if (declared.some((d) => d.id === entry.id)) {
        problems.push(`${where}: server id ${entry.id} is declared twice; the first one is used`);
        continue;
      }
      declared.push({ ...entry, args: entry.args ?? [], source: file });
    }
  }
  const ids = new Set(declared.map((d) => d.id));
  return { servers: [...declared, ...builtIn.filter((b) => !ids.has(b.id))], problems };
}

let table: LanguageTable | undefined;

/** The table this runner uses, read on first use. */
export function activeLanguages(): LanguageTable {
  table ??= loadLanguages();
  return table;
}
