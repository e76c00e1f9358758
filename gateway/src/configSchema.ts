import * as os from 'node:os';
import * as path from 'node:path';
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { DEFAULT_PROVIDER, PROVIDERS, type ProviderName } from './sandbox/names';
import { tenancySchema } from './tenancy/config';

/**
 * The gateway config, written once: the JSON Schema below validates the file and the effective
 * config, `GatewayConfig` is its static type, `default`s are the built-in values and the
 * README's configuration table is generated from the descriptions (npm run docs:config).
 *
 * Two annotations of our own, ignored by validation: `env` names the environment variable that
 * sets a key, `docDefault` is how the README states a default that is not a plain literal.
 */
export const CONFIG_ANNOTATIONS = ['env', 'docDefault'] as const;

const KUBERNETES_TRANSPORTS = ['exec', 'tcp'] as const;

const limits = (whose: string, memoryMb: number, cpuMillis: number, pids: number, diskMb: number) =>
  Type.Object(
    {
      memoryMb: Type.Integer({ minimum: 64, default: memoryMb, description: `${whose} memory, in MiB` }),
      cpuMillis: Type.Integer({
        minimum: 100,
        default: cpuMillis,
        description: `${whose} CPU, in thousandths of a core`,
      }),
      pids: Type.Integer({ minimum: 16, default: pids, description: `${whose} number of processes` }),
      diskMb: Type.Integer({
        minimum: 16,
        default: diskMb,
        description: `${whose} size of the workspace filesystem, in MiB (see docs/tenancy.md)`,
      }),
    },
    { additionalProperties: false },
  );

export const configSchema = Type.Object(
  {
    listen: Type.String({
      pattern: '^.+:[0-9]+$',
      default: '127.0.0.1:50051',
      env: 'TETHER_LISTEN',
      description: 'host:port to serve on',
    }),
    http: Type.Object(
      {
        listen: Type.String({
          pattern: '^(.+:[0-9]+|off)?$',
          default: '127.0.0.1:50052',
          env: 'TETHER_HTTP_LISTEN',
          description:
            "host:port of the HTTP listener: tether's API over Connect and plain HTTP/JSON (HTTP/1.1 and cleartext HTTP/2 on one port; docs/http.md) and the surfaces registered beside it; empty or `off` turns it off",
        }),
      },
      { additionalProperties: false },
    ),
    tokens: Type.Unsafe<Record<string, string>>({
      type: 'object',
      additionalProperties: { type: 'string', minLength: 1 },
      default: {},
      env: 'TETHER_TOKENS',
      docDefault: '— (required)',
      description: "bearer token → tenant; the variable takes `tok=tenant,…` and adds to the file's tokens",
    }),
    provider: Type.Unsafe<ProviderName>({
      enum: [...PROVIDERS],
      default: DEFAULT_PROVIDER,
      env: 'TETHER_PROVIDER',
      description: '`docker`, `kubernetes` (a pod per run; docs/kubernetes.md), or `process` (no isolation)',
    }),
    instance: Type.String({
      pattern: '^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$',
      default: 'default',
      env: 'TETHER_INSTANCE',
      description:
        "names this gateway's runs; on start a gateway re-attaches to (and cleans up) only its own instance's runs",
    }),
    allowProcessProvider: Type.Boolean({
      default: false,
      env: 'TETHER_ALLOW_PROCESS_PROVIDER',
      description: 'the process provider runs only when this is set (the variable: `1` or `true`)',
    }),
    workspaceRoots: Type.Array(Type.String({ minLength: 1 }), {
      default: [],
      env: 'TETHER_WORKSPACE_ROOTS',
      description:
        'host directories a run may use as its workspace, and their subdirectories (the variable is `:`-separated)',
    }),
    stateDir: Type.String({
      minLength: 1,
      default: path.join(os.tmpdir(), 'tether'),
      env: 'TETHER_STATE_DIR',
      docDefault: '`$TMPDIR/tether`',
      description: "where the process provider keeps workspaces and the docker provider the runs' disk images",
    }),
    fastPath: Type.Boolean({
      default: true,
      env: 'TETHER_FAST_PATH',
      description:
        "reach runners through a Unix socket in `<stateDir>/sockets/` instead of the engine's attach (falls back to stdio where the socket cannot be used)",
    }),
    limits: Type.Object(
      {
        default: limits('per-run default:', 2048, 2000, 512, 2048),
        max: limits('per-run maximum (requests above it are refused):', 8192, 2000, 4096, 20480),
      },
      { additionalProperties: false },
    ),
    maxMessageBytes: Type.Integer({
      minimum: 1024,
      default: 16 * 1024 * 1024,
      docDefault: '16 MiB',
      description: 'largest gRPC message, in bytes',
    }),
    maxConcurrentStreams: Type.Integer({
      minimum: 0,
      default: 0,
      docDefault: '0 (unlimited)',
      description:
        "calls one client connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); a client's further calls wait in the client, costing the gateway nothing. 0 leaves it unlimited (a platform multiplexing many agents over one connection needs many); see docs/tenancy.md",
    }),
    maxPutFilesBytes: Type.Integer({
      minimum: 1024,
      default: 1024 * 1024 * 1024,
      docDefault: '1 GiB',
      description: "largest archive one `PutFiles` may send, in bytes (it is spooled on the gateway's disk)",
    }),
    runs: Type.Object(
      {
        idleTimeoutSeconds: Type.Number({
          minimum: 0,
          default: 3600,
          description: 'a run with no calls for this long is stopped',
        }),
        maxLifetimeSeconds: Type.Number({
          minimum: 0,
          default: 6 * 3600,
          description: 'a run is stopped after this long (paused or not)',
        }),
        idlePauseSeconds: Type.Number({
          minimum: 0,
          default: 600,
          description:
            'a run with no calls for this long is paused, where its provider can pause it (0: never); the next call resumes it',
        }),
        memoryPause: Type.Boolean({
          default: true,
          description:
            'pause and fork at memory depth (the whole sandbox checkpointed) where the provider can; false: always at portable depth',
        }),
        pausedRetentionSeconds: Type.Number({
          minimum: 0,
          default: 7 * 24 * 3600,
          docDefault: '7 days',
          description:
            'a paused run is stopped, and its workspace removed, after this long paused (0: kept until its lifetime ends)',
        }),
        maxForks: Type.Integer({
          minimum: 1,
          default: 10,
          description: 'most forks one `ForkRun` may make',
        }),
        maxPausedPerTenant: Type.Integer({
          minimum: 0,
          default: 100,
          description:
            'paused runs per tenant: past it a pause is refused, and an idle run is not paused (it is stopped at the idle timeout)',
        }),
        maxPerTenant: Type.Integer({
          minimum: 1,
          default: 50,
          description: 'live runs per tenant (the default of `tenancy.default.liveRuns`)',
        }),
        startTimeoutSeconds: Type.Number({ minimum: 1, default: 60, description: 'time for a new runner to answer' }),
      },
      { additionalProperties: false },
    ),
    questions: Type.Object(
      {
        timeoutSeconds: Type.Number({
          exclusiveMinimum: 0,
          default: 600,
          description: 'how long a card waits for the human',
        }),
      },
      { additionalProperties: false },
    ),
    docker: Type.Object(
      {
        socketPath: Type.String({ default: '/var/run/docker.sock', env: 'DOCKER_SOCKET', description: 'the engine' }),
        image: Type.String({
          default: '',
          env: 'TETHER_IMAGE',
          docDefault: 'written by setup',
          description: 'the runner image',
        }),
        runtime: Type.String({
          default: '',
          env: 'TETHER_RUNTIME',
          docDefault: 'engine default',
          description:
            'OCI runtime, e.g. `runsc` for gVisor (`TETHER_WITH_RUNSC=1 npm start` installs and registers it)',
        }),
        runtimeArgs: Type.Array(Type.String(), {
          default: [],
          description:
            "the runtime's arguments, only checked by `tether doctor` (they belong in the engine's `daemon.json`)",
        }),
        keepOnShutdown: Type.Boolean({
          default: false,
          description: 'leave runs running when the gateway stops (they are re-attached on the next start)',
        }),
        user: Type.String({ default: '1000:1000', description: 'the non-root user runs execute as' }),
        disk: Type.Unsafe<'loop' | 'none'>({
          enum: ['loop', 'none'],
          default: 'loop',
          env: 'TETHER_DISK',
          description:
            '`loop`: each fresh workspace is an ext4 image of `diskMb` on a loop device (needs root, or a gateway container with `-v /dev:/dev` and loop device cgroup rules; docs/tenancy.md); `none`: no disk limit',
        }),
        spareDisks: Type.Integer({
          minimum: 0,
          maximum: 16,
          default: 2,
          description:
            'with `disk: loop`, workspace disks kept formatted and attached ahead of need for each disk size runs asked for lately (the four latest), so a cold start does not make its own; 0 turns it off',
        }),
      },
      { additionalProperties: false },
    ),
    kubernetes: Type.Object(
      {
        namespace: Type.String({
          default: 'tether-runs',
          env: 'TETHER_K8S_NAMESPACE',
          description:
            'the namespace run pods are created in (the gateway needs pods, pods/exec and pods/attach there)',
        }),
        kubeconfig: Type.String({
          default: '',
          env: 'KUBECONFIG',
          docDefault: 'in-cluster, else ~/.kube/config',
          description: "a kubeconfig file for the cluster; empty: the pod's ServiceAccount when in a cluster",
        }),
        image: Type.String({
          default: '',
          env: 'TETHER_K8S_IMAGE',
          docDefault: '`docker.image`',
          description: 'the runner image as the nodes know it (a template run uses its own image)',
        }),
        runtimeClassName: Type.String({
          default: '',
          env: 'TETHER_K8S_RUNTIME_CLASS',
          docDefault: 'cluster default',
          description: 'RuntimeClass of run pods, e.g. `gvisor` (deploy/kubernetes/optional/)',
        }),
        user: Type.String({ default: '1000:1000', description: 'uid:gid run pods execute as (non-root)' }),
        transport: Type.Unsafe<(typeof KUBERNETES_TRANSPORTS)[number]>({
          enum: [...KUBERNETES_TRANSPORTS],
          default: 'exec',
          env: 'TETHER_K8S_TRANSPORT',
          description:
            "how replicas reach a run's runner: `exec` (a connector exec'd through the API server, no pod network) or `tcp` (the pod's address and `runnerPort`, for clusters whose CNI enforces deploy/kubernetes/40-runs-networkpolicy.yaml)",
        }),
        runnerPort: Type.Integer({
          minimum: 1024,
          maximum: 65535,
          default: 7070,
          env: 'TETHER_K8S_RUNNER_PORT',
          description:
            "the TCP port the runner listens on in its pod with `transport: tcp` (the runs' NetworkPolicy admits gateway pods on it)",
        }),
        ephemeralOverheadMb: Type.Integer({
          minimum: 16,
          default: 256,
          description:
            "node disk a run pod may use beyond its workspace (`diskMb`): its writable layer and logs; the pod's `ephemeral-storage` limit is the sum",
        }),
        agentSandbox: Type.Boolean({
          default: false,
          env: 'TETHER_K8S_AGENT_SANDBOX',
          description:
            "runs with the default limits (no template, no egress) are kubernetes-sigs/agent-sandbox `SandboxClaim`s against a `SandboxWarmPool` of `pool.size` of a `SandboxTemplate` of tether's run pod, all named `tether-<instance>` (the cluster needs agent-sandbox's controller with `--extensions`; docs/kubernetes.md); tether's own cluster pool is then off",
        }),
        cpuRequestPercent: Type.Integer({
          minimum: 1,
          maximum: 100,
          default: 10,
          env: 'TETHER_K8S_CPU_REQUEST_PERCENT',
          description:
            "the share of a run's CPU limit (`cpuMillis`) its pod requests, which the scheduler places it by; memory is requested in full. 100 makes every run pod Guaranteed, and a node then holds only as many runs as it has cores for",
        }),
        workspace: Type.Object(
          {
            storageClassName: Type.String({
              default: '',
              pattern: '^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)?$',
              env: 'TETHER_K8S_WORKSPACE_CLASS',
              docDefault: '— (an `emptyDir`)',
              description:
                "StorageClass of a PersistentVolumeClaim made for each run's workspace (ReadWriteOnce, deleted with the run; the gateway then needs persistentvolumeclaims in the runs namespace); empty: a size-limited `emptyDir`",
            }),
            sizeMb: Type.Integer({
              minimum: 16,
              default: 1024,
              description: "a run's claim size, in MiB, when the run has no `diskMb`",
            }),
            bindTimeoutSeconds: Type.Integer({
              minimum: 1,
              default: 60,
              description:
                "how long CreateRun waits for a run's claim to be bound before it fails (and removes the run's pod and claim)",
            }),
          },
          { additionalProperties: false },
        ),
        templates: Type.Unsafe<Record<string, string>>({
          type: 'object',
          propertyNames: { pattern: '^[a-z0-9][a-z0-9_.-]{0,62}$' },
          additionalProperties: { type: 'string', minLength: 1, maxLength: 512 },
          default: {},
          description:
            'template → its image as the nodes know it (built by `tether template build`, then pushed or loaded onto the nodes); a run naming the template gets a pod of that image',
        }),
      },
      { additionalProperties: false },
    ),
    tenancy: tenancySchema,
    templates: Type.Object(
      {
        allowed: Type.Unsafe<Record<string, string[]>>({
          type: 'object',
          additionalProperties: { type: 'array', items: { type: 'string', pattern: '^[a-z0-9][a-z0-9_.-]{0,62}$' } },
          default: {},
          description:
            'tenant → the runner templates (built by `tether template build`) its runs may name; `*` as the tenant applies to every tenant. The base runner image is always allowed',
        }),
        maxSnapshots: Type.Integer({
          minimum: 0,
          default: 8,
          description:
            'warmed snapshots of templates with a warm-up (`warmup.json`, docs/templates.md) kept at most, one per template image and run shape (features, limits); runs past it start cold; 0 turns warm starts off',
        }),
      },
      { additionalProperties: false },
    ),
    egress: Type.Object(
      {
        allowed: Type.Unsafe<Record<string, string[]>>({
          type: 'object',
          additionalProperties: { type: 'array', items: { type: 'string', minLength: 1 } },
          default: {},
          description:
            'tenant → the hosts its runs may be granted, each `host:port` or `*.suffix:port` (port 443 when left out); `*` as the tenant applies to every tenant. Runs get none unless CreateRun asks',
        }),
        testHosts: Type.Unsafe<Record<string, string>>({
          type: 'object',
          additionalProperties: { type: 'string', pattern: '^127\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}$' },
          default: {},
          description:
            'for tests only: host name → loopback address the egress proxy resolves it to instead of asking DNS (the one way a loopback address is reachable)',
        }),
      },
      { additionalProperties: false },
    ),
    metrics: Type.Object(
      {
        listen: Type.String({
          pattern: '^(.+:[0-9]+)?$',
          default: '',
          env: 'TETHER_METRICS_LISTEN',
          docDefault: 'off',
          description:
            'host:port of the Prometheus `/metrics` endpoint, e.g. `127.0.0.1:9464`; empty turns it off (it has no authentication: keep it on loopback or a private network)',
        }),
      },
      { additionalProperties: false },
    ),
    tracing: Type.Object(
      {
        otlpEndpoint: Type.String({
          default: '',
          env: 'TETHER_OTLP_ENDPOINT',
          docDefault: 'off',
          description:
            'OTLP/HTTP traces URL, e.g. `http://127.0.0.1:4318/v1/traces`; empty turns tracing off (the SDK is then never loaded)',
        }),
        serviceName: Type.String({
          minLength: 1,
          default: 'tether-gateway',
          description: 'the `service.name` spans are reported under',
        }),
      },
      { additionalProperties: false },
    ),
    audit: Type.Object(
      {
        path: Type.String({
          default: '',
          env: 'TETHER_AUDIT_LOG',
          docDefault: 'off',
          description:
            'file the audit log is appended to, one JSON object per line (`-` for stdout); empty turns it off',
        }),
      },
      { additionalProperties: false },
    ),
    pool: Type.Object(
      {
        size: Type.Integer({
          minimum: 0,
          default: 2,
          env: 'TETHER_POOL_SIZE',
          description:
            'idle sandboxes kept started for runs with the default limits (a CreateRun with those limits claims one instead of starting cold); 0 turns the pool off',
        }),
        maxTotal: Type.Integer({
          minimum: 0,
          default: 8,
          description: 'idle and starting pooled sandboxes at most, over all classes',
        }),
        maxMemoryMb: Type.Integer({
          minimum: 0,
          default: 8192,
          description:
            "the gateway's budget for pooled sandboxes: their memory limits summed (a pooled sandbox has no tenant; once claimed it counts against its tenant's quota instead)",
        }),
        templates: Type.Unsafe<Record<string, number>>({
          type: 'object',
          propertyNames: { pattern: '^[a-z0-9][a-z0-9_.-]{0,62}$' },
          additionalProperties: { type: 'integer', minimum: 0 },
          default: {},
          description:
            'template → idle sandboxes kept of it, with the default limits (a CreateRun naming the template with those limits claims one); the base image is `size`',
        }),
        concurrency: Type.Integer({
          minimum: 1,
          default: 1,
          description:
            'pooled sandboxes started at once (each start waits its turn in the admission queue like a create)',
        }),
      },
      { additionalProperties: false },
    ),
    e2b: Type.Object(
      {
        enabled: Type.Boolean({
          default: true,
          env: 'TETHER_E2B',
          description:
            "serve E2B's API (control plane and each sandbox's own) on the HTTP listener, for E2B's SDKs pointed at it (docs/e2b.md)",
        }),
        accessTokenKey: Type.String({
          default: '',
          env: 'TETHER_E2B_ACCESS_TOKEN_KEY',
          docDefault: 'random per process',
          description:
            "key of the sandboxes' access tokens (`envdAccessToken`); set the same on every replica. Unset: a random one, so tokens end with the process (the SDKs' connect hands out new ones)",
        }),
        maxFileBytes: Type.Integer({
          minimum: 1024,
          default: 64 * 1024 * 1024,
          description: 'bytes of one file read or written through `/files`',
        }),
      },
      { additionalProperties: false },
    ),
    runner: Type.Unsafe<Record<string, unknown>>({
      type: 'object',
      default: {},
      docDefault: 'per family',
      description: 'settings handed to the tool families, keyed by family (see its page in `docs/`)',
    }),
  },
  { additionalProperties: false },
);

export type GatewayConfig = Static<typeof configSchema>;
export type { ProviderName } from './sandbox/names';
export type ResourceLimits = GatewayConfig['limits']['default'];

/** One settable key: a value that is not itself a set of keys. */
export interface ConfigLeaf {
  /** Dotted path, e.g. "runs.maxPerTenant". */
  key: string;
  path: string[];
  schema: TSchema;
}

/** The settable keys in declaration order. */
export function configLeaves(schema: TSchema = configSchema, at: string[] = []): ConfigLeaf[] {
  // A key with a default of its own is one setting, whatever its shape.
  if (schema.type === 'object' && schema.properties && !('default' in schema)) {
    return Object.entries(schema.properties as Record<string, TSchema>).flatMap(([k, s]) =>
      configLeaves(s, [...at, k]),
    );
  }
  return [{ key: at.join('.'), path: at, schema }];
}

/** The schema of a config file: every key may be left out (defaults fill it in). */
export function partialSchema(schema: TSchema): TSchema {
  if (schema.type !== 'object' || !schema.properties) return schema;
  const { required: _required, properties, ...rest } = schema;
  const optional = Object.fromEntries(
    Object.entries(properties as Record<string, TSchema>).map(([k, s]) => [k, partialSchema(s)]),
  );
  return { ...rest, properties: optional };
}
