import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { defaultConfig, loadConfig } from '../../../gateway/src/config';
import { configTable, withTable } from '../../../gateway/src/configDocs';
import { configLeaves } from '../../../gateway/src/configSchema';

const repoRoot = path.resolve(__dirname, '../../../..');
const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-config-'));
const configFile = (body: unknown) => {
  const f = path.join(dir, `c${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(f, JSON.stringify(body));
  return f;
};

test("README's configuration table is the one the config schema generates", () => {
  const readme = readFileSync(path.join(repoRoot, 'README.md'), 'utf8');
  assert.equal(readme, withTable(readme), 'README.md is out of date: run npm run docs:config');
});

test('every config key documents itself, and the table has one row per key', () => {
  const leaves = configLeaves();
  for (const { key, schema } of leaves)
    assert.ok(typeof schema.description === 'string' && schema.description.length > 0, `${key} has no description`);
  assert.equal(configTable().split('\n').length, leaves.length + 2);
  assert.ok(
    configTable().includes(
      '| `runs.maxPerTenant` | — | 50 | live runs per tenant (the default of `tenancy.default.liveRuns`) |',
    ),
  );
});

test("the schema's defaults are the built-in config", () => {
  assert.deepEqual(defaultConfig(), {
    listen: '127.0.0.1:50051',
    http: { listen: '127.0.0.1:50052' },
    tokens: {},
    provider: 'docker',
    instance: 'default',
    allowProcessProvider: false,
    workspaceRoots: [],
    stateDir: path.join(os.tmpdir(), 'tether'),
    fastPath: true,
    limits: {
      default: { memoryMb: 2048, cpuMillis: 2000, pids: 512, diskMb: 2048 },
      max: { memoryMb: 8192, cpuMillis: 2000, pids: 4096, diskMb: 20480 },
    },
    maxMessageBytes: 16 * 1024 * 1024,
    maxConcurrentStreams: 0,
    maxPutFilesBytes: 1024 * 1024 * 1024,
    runs: {
      idleTimeoutSeconds: 3600,
      maxLifetimeSeconds: 6 * 3600,
      idlePauseSeconds: 600,
      memoryPause: true,
      pausedRetentionSeconds: 7 * 24 * 3600,
      maxForks: 10,
      maxPausedPerTenant: 100,
      maxPerTenant: 50,
      startTimeoutSeconds: 60,
    },
    questions: { timeoutSeconds: 600 },
    docker: {
      socketPath: '/var/run/docker.sock',
      image: '',
      runtime: '',
      runtimeArgs: [],
      keepOnShutdown: false,
      user: '1000:1000',
      disk: 'loop',
      spareDisks: 2,
    },
    kubernetes: {
      namespace: 'tether-runs',
      kubeconfig: '',
      image: '',
      runtimeClassName: '',
      user: '1000:1000',
      transport: 'exec',
      runnerPort: 7070,
      ephemeralOverheadMb: 256,
      agentSandbox: false,
      cpuRequestPercent: 10,
      workspace: { storageClassName: '', sizeMb: 1024, bindTimeoutSeconds: 60 },
      templates: {},
    },
    tenancy: { default: {}, tenants: {}, admission: { concurrency: 8 } },
    templates: { allowed: {}, maxSnapshots: 8 },
    egress: { allowed: {}, testHosts: {} },
    metrics: { listen: '' },
    tracing: { otlpEndpoint: '', serviceName: 'tether-gateway' },
    audit: { path: '' },
    pool: { size: 2, maxTotal: 8, maxMemoryMb: 8192, concurrency: 1, templates: {} },
    e2b: { enabled: true, accessTokenKey: '', maxFileBytes: 64 * 1024 * 1024 },
    runner: {},
  });
  const a = defaultConfig();
  a.workspaceRoots.push('/x');
  assert.deepEqual(defaultConfig().workspaceRoots, [], 'each call gets its own copy');
});

test('unknown keys in a config file are refused at start, naming the key', () => {
  assert.throws(
    () => loadConfig({ file: configFile({ tokens: { t: 'a' }, listen_addr: 'x:1' }), env: {} }),
    /\/listen_addr is not a known key/,
  );
  assert.throws(
    () => loadConfig({ file: configFile({ tokens: { t: 'a' }, docker: { imag: 'x' } }), env: {} }),
    /\/docker\/imag is not a known key/,
  );
  assert.throws(
    () => loadConfig({ file: configFile({ runs: { maxPerTenant: 0 } }), env: {} }),
    /\/runs\/maxPerTenant must be >= 1/,
  );
  assert.throws(
    () => loadConfig({ env: { TETHER_TOKENS: 't=a', TETHER_PROVIDER: 'podman' } }),
    /\/provider must be one of docker, process/,
  );
  assert.equal(loadConfig({ env: { TETHER_TOKENS: 't=a', TETHER_POOL_SIZE: '5' } }).pool.size, 5);
  assert.equal(loadConfig({ env: { TETHER_TOKENS: 't=a', TETHER_HTTP_LISTEN: 'off' } }).http.listen, 'off');
  assert.throws(
    () => loadConfig({ env: { TETHER_TOKENS: 't=a', TETHER_HTTP_LISTEN: 'localhost' } }),
    /\/http\/listen must match pattern/,
  );
  assert.throws(
    () => loadConfig({ env: { TETHER_TOKENS: 't=a', TETHER_POOL_SIZE: 'five' } }),
    /\/pool\/size must be integer/,
  );
});

test('a file sets some keys, the environment then others, each by its type', () => {
  const file = configFile({ tokens: { f: 'from-file' }, docker: { image: 'img:1' }, runs: { maxPerTenant: 3 } });
  const cfg = loadConfig({
    file,
    env: {
      TETHER_TOKENS: 'e=from-env',
      TETHER_WORKSPACE_ROOTS: '/a::/b',
      TETHER_ALLOW_PROCESS_PROVIDER: 'true',
      TETHER_PROVIDER: 'process',
      TETHER_RUNTIME: 'runsc',
      DOCKER_SOCKET: '/run/d.sock',
    },
    overrides: { listen: '127.0.0.1:1' },
  });
  assert.deepEqual(cfg.tokens, { f: 'from-file', e: 'from-env' });
  assert.deepEqual(cfg.workspaceRoots, ['/a', '/b']);
  assert.equal(cfg.allowProcessProvider, true);
  assert.equal(cfg.provider, 'process');
  assert.deepEqual(cfg.docker, {
    ...defaultConfig().docker,
    image: 'img:1',
    runtime: 'runsc',
    socketPath: '/run/d.sock',
  });
  assert.deepEqual(cfg.runs, { ...defaultConfig().runs, maxPerTenant: 3 });
  assert.equal(cfg.listen, '127.0.0.1:1');
  assert.equal(
    loadConfig({ env: { TETHER_TOKENS: 't=a', TETHER_ALLOW_PROCESS_PROVIDER: '0' } }).allowProcessProvider,
    false,
  );
});
