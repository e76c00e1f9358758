import { closeSync, fsyncSync, openSync, readFileSync, writeSync } from 'node:fs';
import * as v8 from 'node:v8';
import type { KernelStateReport } from '../wire';

/**
 * Keeping the JavaScript kernel's globals across a pause. What a cell defined is a global (cells
 * declare with `var`); those serializable by structured clone (`v8.serialize`) are kept: numbers,
 * strings, plain objects and arrays, Map, Set, Date, RegExp, typed arrays, errors. Functions,
 * class instances (their prototype and methods would be lost), promises and symbols are named
 * with the reason. A module a cell `require`d is kept by its id and required again.
 */

const FORMAT = 'tether-javascript-state';

interface SavedState {
  format: typeof FORMAT;
  version: 1;
  node: string;
  modules: Record<string, string>;
  variables: [string, Uint8Array][];
}

const PLAIN_PROTOTYPES = new Set<unknown>([
  Object.prototype,
  null,
  Array.prototype,
  Map.prototype,
  Set.prototype,
  Date.prototype,
  RegExp.prototype,
  ArrayBuffer.prototype,
  Boolean.prototype,
  Number.prototype,
  String.prototype,
  Error.prototype,
  TypeError.prototype,
  RangeError.prototype,
  SyntaxError.prototype,
]);

/** Why a value cannot be kept, looking into it (at most `budget` nodes), or undefined. */
function unkeepable(value: unknown, at: string, seen: Set<object>, budget: { nodes: number }): string | undefined {
  if (typeof value === 'function')
    return `${at ? `${at} is ` : ''}a function: its code and closure are not saved; run its definition again`;
  if (typeof value === 'symbol') return `${at ? `${at} is ` : ''}a symbol: symbols do not serialize`;
  if (value === null || typeof value !== 'object') return undefined;
  if (seen.has(value) || --budget.nodes < 0) return undefined;
  seen.add(value);
  if (Object.prototype.toString.call(value) === '[object Module]')
    return `${at ? `${at} is ` : ''}an imported ES module: import it again`;
  if (value instanceof Promise) return `${at ? `${at} is ` : ''}a promise: await it before the pause, or run it again`;
  if (ArrayBuffer.isView(value)) return undefined;
  const proto = Object.getPrototypeOf(value);
  if (!PLAIN_PROTOTYPES.has(proto)) {
    const name = (proto?.constructor as { name?: string } | undefined)?.name || 'a class';
    return `${at ? `${at} is ` : ''}an instance of ${name}: only plain data is saved, not its class and methods; build it again`;
  }
  const entries: [string, unknown][] =
    value instanceof Map
      ? [...value].flatMap(([k, v], i) => [
          [`${at}<key ${i}>`, k],
          [`${at}<value ${i}>`, v],
        ])
      : value instanceof Set
        ? [...value].map((v, i) => [`${at}<item ${i}>`, v])
        : Object.entries(value).map(([k, v]) => [Array.isArray(value) ? `${at}[${k}]` : `${at}.${k}`, v]);
  for (const [where, v] of entries) {
    const why = unkeepable(v, where, seen, budget);
    if (why) return why;
  }
  return undefined;
}

/** Writes the globals not in `baseline` to `path`, at most `limit` bytes. */
export function saveGlobals(
  path: string,
  limit: number,
  baseline: ReadonlySet<string>,
  required: ReadonlyMap<unknown, string>,
): KernelStateReport {
  const g = globalThis as Record<string, unknown>;
  const report: KernelStateReport = { serializer: 'v8', variables: [], modules: {}, bytes: 0, notKept: [] };
  const variables: [string, Uint8Array][] = [];
  let bytes = 0;
  for (const name of Object.getOwnPropertyNames(g)) {
    if (baseline.has(name)) continue;
    const desc = Object.getOwnPropertyDescriptor(g, name);
    if (!desc || !('value' in desc)) continue;
    const value = desc.value;
    const id = required.get(value);
    if (id !== undefined) {
      report.modules[name] = id;
      continue;
    }
    const what = `variable ${name} (${value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value})`;
    let why = unkeepable(value, '', new Set(), { nodes: 100_000 });
    if (!why) {
      try {
        const payload = v8.serialize(value);
        if (bytes + payload.length > limit)
          why = `its ${payload.length} bytes would pass the limit of the saved state (${limit - bytes} bytes left)`;
        else {
          variables.push([name, payload]);
          bytes += payload.length;
          report.variables.push(name);
          continue;
        }
      } catch (err) {
        why = `it does not serialize (${(err as Error).message})`;
      }
    }
    report.notKept.push({ what, why });
  }
  const saved: SavedState = { format: FORMAT, version: 1, node: process.version, modules: report.modules, variables };
  const data = v8.serialize(saved);
  const fd = openSync(path, 'wx', 0o600);
  try {
    writeSync(fd, data);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  report.bytes = data.length;
  return report;
}

/** Reads back what saveGlobals wrote: each variable a global again, each module required again. */
export function loadGlobals(path: string, require: (id: string) => unknown): KernelStateReport {
  const g = globalThis as Record<string, unknown>;
  const data = readFileSync(path);
  const saved = v8.deserialize(data) as SavedState;
  if (saved?.format !== FORMAT) throw new Error(`${path} is not a saved JavaScript state`);
  const report: KernelStateReport = { serializer: 'v8', variables: [], modules: {}, bytes: data.length, notKept: [] };
  for (const [name, id] of Object.entries(saved.modules)) {
    try {
      g[name] = require(id);
      report.modules[name] = id;
    } catch (err) {
      report.notKept.push({
        what: `module ${name} (${id})`,
        why: `it could not be required again: ${(err as Error).message}`,
      });
    }
  }
  for (const [name, payload] of saved.variables) {
    try {
      g[name] = v8.deserialize(payload);
      report.variables.push(name);
    } catch (err) {
      report.notKept.push({ what: `variable ${name}`, why: `it could not be read back: ${(err as Error).message}` });
    }
  }
  return report;
}
