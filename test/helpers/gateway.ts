import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { TetherClient } from '../../clients/typescript/src';
import { defaultConfig, type GatewayConfig } from '../../gateway/src/config';
import { startGateway, type RunningGateway } from '../../gateway/src/server';
import type { SandboxProvider } from '../../gateway/src/sandbox/provider';

export const TOKENS = { 'token-alice': 'alice', 'token-bob': 'bob' } as const;

export interface TestGateway {
  gateway: RunningGateway;
  config: GatewayConfig;
  alice: TetherClient;
  bob: TetherClient;
  client(token: string): TetherClient;
  close(): Promise<void>;
}

type Overrides = { [K in keyof GatewayConfig]?: Partial<GatewayConfig[K]> | GatewayConfig[K] };

/**
 * Starts a gateway in this process on a free loopback port. The provider defaults to
 * `process` (fast, no isolation); pass TETHER_TEST_PROVIDER=docker or `provider` to use Docker.
 */
export async function startTestGateway(over: Overrides = {}, provider?: SandboxProvider): Promise<TestGateway> {
  const base = defaultConfig();
  const chosen =
    (over.provider as GatewayConfig['provider'] | undefined) ??
    ((process.env.TETHER_TEST_PROVIDER as GatewayConfig['provider']) || 'process');
  const config: GatewayConfig = {
    ...base,
    listen: '127.0.0.1:0',
    tokens: { ...TOKENS },
    provider: chosen,
    // Test gateways share one engine: each recovers (and removes as orphans) only its own runs.
    instance: `test-${process.pid}-${Math.random().toString(36).slice(2, 8)}`,
    allowProcessProvider: true,
    stateDir: mkdtempSync(path.join(os.tmpdir(), 'tether-test-')),
    ...over,
    runs: { ...base.runs, ...(over.runs as object) },
    limits: {
      default: { ...base.limits.default, ...(over.limits as GatewayConfig['limits'] | undefined)?.default },
      max: { ...base.limits.max, ...(over.limits as GatewayConfig['limits'] | undefined)?.max },
    },
    tenancy: { ...base.tenancy, ...(over.tenancy as object) },
    templates: { ...base.templates, ...(over.templates as object) },
    questions: { ...base.questions, ...(over.questions as object) },
    docker: { ...base.docker, image: process.env.TETHER_IMAGE ?? base.docker.image, ...(over.docker as object) },
    // No warm pool unless a test asks for one: runs start cold, and a run's container carries its id.
    pool: { ...base.pool, size: 0, ...(over.pool as object) },
    // No HTTP listener unless a test asks for one (`http: { listen: '127.0.0.1:0' }`): gateways side by side.
    http: { ...base.http, listen: '', ...(over.http as object) },
  } as GatewayConfig;
  const gateway = await startGateway(config, provider);
  const clients: TetherClient[] = [];
  const client = (token: string) => {
    const c = new TetherClient(gateway.address, token);
    clients.push(c);
    return c;
  };
  const alice = client('token-alice');
  const bob = client('token-bob');
  return {
    gateway,
    config,
    alice,
    bob,
    client,
    async close() {
      clients.forEach((c) => c.close());
      await gateway.close();
    },
  };
}
