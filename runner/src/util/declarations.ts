import { readdirSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import type { Static, TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';

/** One valid entry of a declaration folder, and the file it came from. */
export interface Declared<T> {
  entry: T;
  file: string;
}

export interface Declarations<T> {
  /** Valid entries in file-name order; of two with the same id, the first. */
  entries: Declared<T>[];
  /** Why a file or an entry was left out, each naming it. */
  problems: string[];
  /** Whether the folder exists at all. */
  found: boolean;
}

/**
 * Reads a folder of `*.json` declarations a template drops into the image (language servers,
 * debug adapters): each file one entry or an array of them, each checked against `schema`.
 * A bad file or entry is reported and skipped, never fatal: the rest still load.
 */
export function readDeclarations<S extends TSchema>(
  dir: string,
  schema: S,
  noun: string,
): Declarations<Static<S> & { id: string }> {
  let names: string[];
  try {
    names = readdirSync(dir)
      .filter((n) => n.endsWith('.json'))
      .sort();
  } catch {
    return { entries: [], problems: [], found: false };
  }
  const entries: Declared<Static<S> & { id: string }>[] = [];
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
      if (!Value.Check(schema, entry)) {
        const first = [...Value.Errors(schema, entry)][0];
        problems.push(`${where}: ${first ? `${first.path || '/'} ${first.message}` : 'invalid'}`);
        continue;
      }
      const id = (entry as { id: string }).id;
      if (entries.some((d) => d.entry.id === id)) {
        problems.push(`${where}: ${noun} id ${id} is declared twice; the first one is used`);
        continue;
      }
      entries.push({ entry: entry as Static<S> & { id: string }, file });
    }
  }
  return { entries, problems, found: true };
}
