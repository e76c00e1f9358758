import * as path from 'node:path';
import { ADAPTER_IDS, ADAPTERS, adaptersForProgram, type AdapterId, type AdapterSpec } from './adapters';
import { loadDeclaredAdapters, type DeclaredAdapter, type DeclaredAdapters } from './declared';

/** The adapters this runner knows: those its template declares first, then the built-in ones. */
export interface AdapterTable {
  specs: AdapterSpec[];
  /** debug.d files that could not be used, and why. */
  problems: string[];
}

/** A declared adapter with a built-in id replaces the built-in one. */
export function adapterTable(declared: DeclaredAdapters): AdapterTable {
  const ids = new Set(declared.adapters.map((a) => a.id));
  return {
    specs: [...declared.adapters, ...ADAPTER_IDS.filter((id) => !ids.has(id)).map((id) => ADAPTERS[id])],
    problems: declared.problems,
  };
}

let table: AdapterTable | undefined;

/** The table this runner uses, read on first use. */
export function activeAdapters(): AdapterTable {
  table ??= adapterTable(loadDeclaredAdapters());
  return table;
}

export function adapterSpec(id: AdapterId, t = activeAdapters()): AdapterSpec | undefined {
  return t.specs.find((s) => s.id === id);
}

const isDeclared = (s: AdapterSpec): s is DeclaredAdapter => !!s.source;

/**
 * The adapters that could debug this program, best first: declared ones by its extension, then
 * the built-in guess from the program itself.
 */
export async function candidatesFor(absProgram: string, t = activeAdapters()): Promise<AdapterId[]> {
  const ext = path.extname(absProgram);
  const declared = t.specs.filter((s) => isDeclared(s) && ext && s.extensions.includes(ext)).map((s) => s.id);
  const builtIn = (await adaptersForProgram(absProgram)).filter((id) => adapterSpec(id, t));
  return [...new Set([...declared, ...builtIn])];
}

/** "debugpy (a .py file), lldb (…)" — what launch tried when nothing fitted. */
export function describeTried(t = activeAdapters()): string {
  return t.specs.map((s) => `${s.id} (${s.handles})`).join(', ');
}
