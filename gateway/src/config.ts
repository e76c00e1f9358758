import { readFileSync } from 'node:fs';
import Ajv from 'ajv';
import { refuseDisallowedProvider } from './sandbox/allowed';
import { checkTenancy } from './tenancy/config';
import {
  CONFIG_ANNOTATIONS,
  configLeaves,
  configSchema,
  partialSchema,
  type GatewayConfig,
  type ResourceLimits,
} from './configSchema';

export type { GatewayConfig, ProviderName, ResourceLimits } from './configSchema';

type DeepPartial<T> = {
  [K in keyof T]?: T[K] extends object ? (T[K] extends unknown[] ? T[K] : DeepPartial<T[K]>) : T[K];
};
type Json = Record<string, unknown>;

const ajv = new Ajv({ allErrors: true });
ajv.addVocabulary([...CONFIG_ANNOTATIONS]);
const checkConfig = ajv.compile<GatewayConfig>(configSchema);
const checkFile = ajv.compile(partialSchema(configSchema));

/** The built-in config: the schema's defaults (no tokens, so not yet servable). */
/** The limits a CreateRun that asks for none gets: the pool's default class. */
export function defaultLimits(config: GatewayConfig): ResourceLimits {
  const { default: d, max: m } = config.limits;
  return {
    memoryMb: Math.min(d.memoryMb, m.memoryMb),
    cpuMillis: Math.min(d.cpuMillis, m.cpuMillis),
    pids: Math.min(d.pids, m.pids),
    diskMb: Math.min(d.diskMb, m.diskMb),
  };
}

export function defaultConfig(): GatewayConfig {
  const defaults = defaultsOf(configSchema);
  if (!checkConfig(defaults))
    throw new Error(`the built-in defaults do not fit the config schema: ${why(checkConfig.errors)}`);
  return defaults;
}

function defaultsOf(schema: Json): unknown {
  if (schema.type === 'object' && isObject(schema.properties) && !('default' in schema)) {
    return Object.fromEntries(Object.entries(schema.properties).map(([k, s]) => [k, defaultsOf(s as Json)]));
  }
  return structuredClone(schema.default);
}

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Keys of `over` replace those of `base`; nested key sets merge, except tokens (a file's set is the whole set). */
function merge(base: Json, over: Json | undefined): Json {
  if (!over) return base;
  const out: Json = { ...base };
  for (const [k, v] of Object.entries(over)) {
    const b = base[k];
    out[k] = isObject(v) && isObject(b) && k !== 'tokens' ? merge(b, v) : v;
  }
  return out;
}

/** Parses "tokenA=tenant1,tokenB=tenant2". */
export function parseTokenList(s: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of s
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean)) {
    const eq = pair.lastIndexOf('=');
    if (eq <= 0 || eq === pair.length - 1) throw new Error('TETHER_TOKENS must be a list of token=tenant pairs');
    out[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return out;
}

/** The keys the environment sets: each key whose schema names an `env` variable, read by the key's type. */
function fromEnvironment(env: NodeJS.ProcessEnv, current: Json): Json {
  const out: Json = {};
  for (const { path, schema } of configLeaves()) {
    const raw = typeof schema.env === 'string' ? env[schema.env] : undefined;
    if (!raw) continue;
    let value: unknown = raw;
    if (schema.type === 'boolean') value = raw === '1' || raw === 'true';
    else if (schema.type === 'array') value = raw.split(':').filter(Boolean);
    // Not a number: left a string, so validation names the variable's key and what it must be.
    else if (schema.type === 'integer' || schema.type === 'number')
      value = Number.isFinite(Number(raw)) ? Number(raw) : raw;
    // Tokens from the environment add to those of the file.
    else if (schema.type === 'object')
      value = { ...(isObject(current[path[0]]) ? (current[path[0]] as Json) : {}), ...parseTokenList(raw) };
    let at = out;
    for (const k of path.slice(0, -1)) at = isObject(at[k]) ? (at[k] as Json) : (at[k] = {});
    at[path[path.length - 1]] = value;
  }
  return out;
}

/**
 * The config: defaults, then a JSON file (TETHER_CONFIG or --config), then environment
 * variables, then explicit overrides (CLI flags). Invalid config fails at start, with the reason.
 */
export function loadConfig(
  opts: { file?: string; env?: NodeJS.ProcessEnv; overrides?: DeepPartial<GatewayConfig> } = {},
): GatewayConfig {
  const env = opts.env ?? process.env;
  let cfg: Json = defaultConfig();
  const file = opts.file ?? env.TETHER_CONFIG;
  if (file) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(file, 'utf8'));
    } catch (err) {
      throw new Error(`cannot read config ${file}: ${(err as Error).message}`);
    }
    if (!checkFile(parsed) || !isObject(parsed)) throw new Error(`invalid config in ${file}: ${why(checkFile.errors)}`);
    cfg = merge(cfg, parsed);
  }
  cfg = merge(cfg, fromEnvironment(env, cfg));
  cfg = merge(cfg, opts.overrides);
  if (!checkConfig(cfg)) throw new Error(`invalid config in the effective config: ${why(checkConfig.errors)}`);
  refuseDisallowedProvider(cfg);
  if (Object.keys(cfg.tokens).length === 0)
    throw new Error('no tokens configured: set "tokens" in the config file or TETHER_TOKENS=token=tenant');
  checkTenancy(cfg.tenancy, cfg.tokens);
  return cfg;
}

/** Ajv's errors as one line naming each offending key (an unknown key is named by its own path). */
function why(errors: typeof checkConfig.errors): string {
  return (errors ?? [])
    .map((e) => {
      const where = e.instancePath || '/';
      if (e.keyword === 'additionalProperties')
        return `${e.instancePath}/${(e.params as { additionalProperty: string }).additionalProperty} is not a known key`;
      if (e.keyword === 'enum')
        return `${where} must be one of ${(e.params as { allowedValues: unknown[] }).allowedValues.join(', ')}`;
      return `${where} ${e.message}`;
    })
    .join('; ');
}
