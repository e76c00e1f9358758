import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import * as os from 'node:os';
import Ajv from 'ajv';
import { checkTenancy, defaultTenancy, tenancySchema, type TenancyConfig } from './tenancy/config';

export type ProviderName = 'docker' | 'process';

export interface ResourceLimits {
  memoryMb: number;
  cpuMillis: number;
  pids: number;
  /** Size of the run's workspace filesystem, MiB (0 for a bind-mounted host workspace). */
  diskMb: number;
}

export interface GatewayConfig {
  /** host:port to listen on. */
  listen: string;
  /** bearer token → tenant. */
  tokens: Record<string, string>;
  provider: ProviderName;
  /**
   * Names this gateway among others sharing one engine: a restarted gateway re-attaches to,
   * and removes as orphans, only the runs labelled with its own instance.
   */
  instance: string;
  /** The process provider has no isolation; it runs only when this is true. */
  allowProcessProvider: boolean;
  /** Host directories a CreateRun may name as its workspace (and their subdirectories). */
  workspaceRoots: string[];
  /** Where the gateway keeps per-run workspaces it creates itself. */
  stateDir: string;
  limits: { default: ResourceLimits; max: ResourceLimits };
  /** Largest gRPC message accepted, in bytes. */
  maxMessageBytes: number;
  /** Largest archive one PutFiles may send, in bytes (it is spooled on the gateway's disk). */
  maxPutFilesBytes: number;
  runs: { idleTimeoutSeconds: number; maxLifetimeSeconds: number; maxPerTenant: number; startTimeoutSeconds: number };
  questions: { timeoutSeconds: number };
  docker: { socketPath: string; image: string; runtime: string; runtimeArgs: string[]; keepOnShutdown: boolean; user: string; disk: 'loop' | 'none' };
  /** Per-tenant quotas, rate limits and fair admission (gateway/src/tenancy). */
  tenancy: TenancyConfig;
  /** Settings handed to the runner's tool families, keyed by family. */
  runner: Record<string, unknown>;
}

export function defaultConfig(): GatewayConfig {
  return {
    listen: '127.0.0.1:50051',
    tokens: {},
    provider: 'docker',
    instance: 'default',
    allowProcessProvider: false,
    workspaceRoots: [],
    stateDir: path.join(os.tmpdir(), 'tether'),
    limits: {
      default: { memoryMb: 2048, cpuMillis: 2000, pids: 512, diskMb: 2048 },
      max: { memoryMb: 8192, cpuMillis: 2000, pids: 4096, diskMb: 20480 },
    },
    maxMessageBytes: 16 * 1024 * 1024,
    maxPutFilesBytes: 1024 * 1024 * 1024,
    runs: { idleTimeoutSeconds: 3600, maxLifetimeSeconds: 6 * 3600, maxPerTenant: 50, startTimeoutSeconds: 60 },
    questions: { timeoutSeconds: 600 },
    docker: { socketPath: '/var/run/docker.sock', image: '', runtime: '', runtimeArgs: [], keepOnShutdown: false, user: '1000:1000', disk: 'loop' },
    tenancy: defaultTenancy(),
    runner: {},
  };
}

const limitsSchema = {
  type: 'object',
  properties: { memoryMb: { type: 'integer', minimum: 64 }, cpuMillis: { type: 'integer', minimum: 100 }, pids: { type: 'integer', minimum: 16 }, diskMb: { type: 'integer', minimum: 16 } },
  additionalProperties: false,
};

const configSchema = {
  type: 'object',
  properties: {
    listen: { type: 'string', pattern: '^.+:[0-9]+$' },
    tokens: { type: 'object', additionalProperties: { type: 'string', minLength: 1 } },
    provider: { enum: ['docker', 'process'] },
    instance: { type: 'string', pattern: '^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$' },
    allowProcessProvider: { type: 'boolean' },
    workspaceRoots: { type: 'array', items: { type: 'string', minLength: 1 } },
    stateDir: { type: 'string', minLength: 1 },
    limits: { type: 'object', properties: { default: limitsSchema, max: limitsSchema }, additionalProperties: false },
    maxMessageBytes: { type: 'integer', minimum: 1024 },
    maxPutFilesBytes: { type: 'integer', minimum: 1024 },
    runs: {
      type: 'object',
      properties: {
        idleTimeoutSeconds: { type: 'number', minimum: 0 },
        maxLifetimeSeconds: { type: 'number', minimum: 0 },
        maxPerTenant: { type: 'integer', minimum: 1 },
        startTimeoutSeconds: { type: 'number', minimum: 1 },
      },
      additionalProperties: false,
    },
    questions: { type: 'object', properties: { timeoutSeconds: { type: 'number', exclusiveMinimum: 0 } }, additionalProperties: false },
    docker: {
      type: 'object',
      properties: {
        socketPath: { type: 'string' },
        image: { type: 'string' },
        runtime: { type: 'string' },
        runtimeArgs: { type: 'array', items: { type: 'string' } },
        keepOnShutdown: { type: 'boolean' },
        user: { type: 'string' },
        disk: { enum: ['loop', 'none'] },
      },
      additionalProperties: false,
    },
    runner: { type: 'object' },
    tenancy: tenancySchema,
  },
  additionalProperties: false,
};

type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? (T[K] extends unknown[] ? T[K] : DeepPartial<T[K]>) : T[K] };

function merge<T>(base: T, over: DeepPartial<T> | undefined): T {
  if (!over) return base;
  const out: any = Array.isArray(base) ? [...(base as any)] : { ...base };
  for (const [k, v] of Object.entries(over)) {
    const b = (base as any)[k];
    out[k] = v && typeof v === 'object' && !Array.isArray(v) && b && typeof b === 'object' && !Array.isArray(b) && k !== 'tokens' ? merge(b, v as any) : v;
  }
  return out;
}

/** Parses "tokenA=tenant1,tokenB=tenant2". */
export function parseTokenList(s: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of s.split(',').map((x) => x.trim()).filter(Boolean)) {
    const eq = pair.lastIndexOf('=');
    if (eq <= 0 || eq === pair.length - 1) throw new Error('TETHER_TOKENS must be a list of token=tenant pairs');
    out[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return out;
}

/**
 * The config: defaults, then a JSON file (TETHER_CONFIG or --config), then environment
 * variables, then explicit overrides (CLI flags). Invalid config fails at start, with the reason.
 */
export function loadConfig(opts: { file?: string; env?: NodeJS.ProcessEnv; overrides?: DeepPartial<GatewayConfig> } = {}): GatewayConfig {
  const env = opts.env ?? process.env;
  let cfg = defaultConfig();
  const file = opts.file ?? env.TETHER_CONFIG;
  if (file) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(file, 'utf8'));
    } catch (err) {
      throw new Error(`cannot read config ${file}: ${(err as Error).message}`);
    }
    validate(parsed, file);
    cfg = merge(cfg, parsed as DeepPartial<GatewayConfig>);
  }
  const fromEnv: DeepPartial<GatewayConfig> = {};
  if (env.TETHER_LISTEN) fromEnv.listen = env.TETHER_LISTEN;
  if (env.TETHER_TOKENS) fromEnv.tokens = { ...cfg.tokens, ...parseTokenList(env.TETHER_TOKENS) };
  if (env.TETHER_PROVIDER) fromEnv.provider = env.TETHER_PROVIDER as ProviderName;
  if (env.TETHER_INSTANCE) fromEnv.instance = env.TETHER_INSTANCE;
  if (env.TETHER_ALLOW_PROCESS_PROVIDER) fromEnv.allowProcessProvider = env.TETHER_ALLOW_PROCESS_PROVIDER === '1' || env.TETHER_ALLOW_PROCESS_PROVIDER === 'true';
  if (env.TETHER_WORKSPACE_ROOTS) fromEnv.workspaceRoots = env.TETHER_WORKSPACE_ROOTS.split(':').filter(Boolean);
  if (env.TETHER_STATE_DIR) fromEnv.stateDir = env.TETHER_STATE_DIR;
  if (env.TETHER_IMAGE) fromEnv.docker = { image: env.TETHER_IMAGE };
  if (env.TETHER_RUNTIME) fromEnv.docker = { ...(fromEnv.docker ?? {}), runtime: env.TETHER_RUNTIME };
  if (env.TETHER_DISK) fromEnv.docker = { ...(fromEnv.docker ?? {}), disk: env.TETHER_DISK as 'loop' | 'none' };
  if (env.DOCKER_SOCKET) fromEnv.docker = { ...(fromEnv.docker ?? {}), socketPath: env.DOCKER_SOCKET };
  cfg = merge(cfg, fromEnv);
  cfg = merge(cfg, opts.overrides);
  validate(cfg, 'the effective config');
  if (cfg.provider === 'process' && !cfg.allowProcessProvider) {
    throw new Error('the process provider runs tools without isolation; enable it explicitly with allowProcessProvider (TETHER_ALLOW_PROCESS_PROVIDER=1)');
  }
  if (Object.keys(cfg.tokens).length === 0) throw new Error('no tokens configured: set "tokens" in the config file or TETHER_TOKENS=token=tenant');
  checkTenancy(cfg.tenancy, cfg.tokens);
  return cfg;
}

function validate(value: unknown, where: string): void {
  const ajv = new Ajv({ allErrors: true });
  const check = ajv.compile(configSchema);
  if (!check(value)) {
    const why = (check.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message}${e.params?.additionalProperty ? `: ${e.params.additionalProperty}` : ''}`).join('; ');
    throw new Error(`invalid config in ${where}: ${why}`);
  }
}
