import Ajv, { type ValidateFunction } from 'ajv';
import type { ToolDescriptor } from '../../protocol/src/tools';

/**
 * Validates tool arguments against each tool's JSON Schema at the edge, so a bad call never
 * reaches the runner. Errors name each bad field in words a model can act on.
 */
export class ArgumentValidator {
  private readonly compiled = new Map<string, ValidateFunction>();

  constructor(tools: ToolDescriptor[]) {
    for (const t of tools) this.compiled.set(t.name, compile(t.inputSchema));
  }

  /** Returns the list of problems; empty when the arguments are valid. */
  check(tool: string, args: unknown): string[] {
    const fn = this.compiled.get(tool);
    if (!fn) return [`unknown tool ${tool}`];
    if (fn(args)) return [];
    return (fn.errors ?? []).map((e) => {
      const at = e.instancePath ? e.instancePath.slice(1).replace(/\//g, '.') : '';
      switch (e.keyword) {
        case 'required':
          return `missing required argument "${(e.params as { missingProperty: string }).missingProperty}"${at ? ` in ${at}` : ''}`;
        case 'additionalProperties':
          return `unknown argument "${(e.params as { additionalProperty: string }).additionalProperty}"${at ? ` in ${at}` : ''}`;
        case 'type':
          return `argument "${at || '(root)'}" must be ${(e.params as { type: string }).type}`;
        case 'enum':
          return `argument "${at}" must be one of ${JSON.stringify((e.params as { allowedValues: unknown[] }).allowedValues)}`;
        default:
          return `argument "${at || '(root)'}" ${e.message}`;
      }
    });
  }
}

const OPTIONS = { allErrors: true, strict: false };
const ajv = new Ajv(OPTIONS);
/** Compiled validators by schema text. Every run of one image lists the same schemas. */
const schemas = new Map<string, ValidateFunction>();
/** More distinct schemas than any set of images has: past it the cache starts again. */
const MAX_SCHEMAS = 512;

/**
 * Compiling a schema costs milliseconds (tens under load), once per tool per run when done
 * per run: the same schema compiles once per gateway instead. A validator keeps no state
 * between calls but `errors`, which `check` reads right after its own call.
 */
function compile(schema: object): ValidateFunction {
  const key = JSON.stringify(schema);
  let fn = schemas.get(key);
  if (!fn) {
    if (schemas.size >= MAX_SCHEMAS) {
      schemas.clear();
      ajv.removeSchema();
    }
    try {
      fn = ajv.compile(schema);
    } catch (err) {
      // Another schema under the same $id (an older runner's): compiled on its own, not kept.
      if (!/already exists/.test((err as Error).message)) throw err;
      return new Ajv(OPTIONS).compile(schema);
    }
    schemas.set(key, fn);
  }
  return fn;
}

/** Parses arguments_json: absent means {}, anything but a JSON object is refused. */
export function parseArguments(
  json: string,
): { ok: true; value: Record<string, unknown> } | { ok: false; error: string } {
  if (json.trim() === '') return { ok: true, value: {} };
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch (err) {
    return { ok: false, error: `arguments_json is not valid JSON: ${(err as Error).message}` };
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    return { ok: false, error: 'arguments_json must be a JSON object' };
  return { ok: true, value: value as Record<string, unknown> };
}
