import * as path from 'node:path';
import { Server, ServerCredentials } from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { ReflectionService } from '@grpc/reflection';
import { HealthImplementation } from 'grpc-health-check';
import { Gateway } from '@tether/contract';
import { encodeCallsOutput, encodeCallToolOutput } from './grpc/resultWire';
import { CallsDrain } from './grpc/calls';
import { TokenAuthenticator } from './auth';
import type { GatewayConfig } from './config';
import { logger } from './log';
import { RunManager } from './runs/RunManager';
import { grpcDefinition } from '@tether/contract/grpc';
import { gatewayHandlers } from './grpc/handlers';
import type { SandboxProvider } from './sandbox/provider';
import { ProcessProvider } from './sandbox/process';
import { serveMetrics, type MetricsEndpoint } from './observability/metricsServer';
import { Telemetry } from './observability/Telemetry';

export const SERVICE_NAME = 'tether.v1.Gateway';
export const PROTO_DIR = path.resolve(__dirname, '../../../proto');

export async function createProvider(config: GatewayConfig): Promise<SandboxProvider> {
  if (config.provider === 'process') {
    if (!config.allowProcessProvider)
      throw new Error('the process provider is disabled (allowProcessProvider is false)');
    logger.warn('using the process provider: tools run WITHOUT isolation (development only)');
    return new ProcessProvider(config.stateDir, config.fastPath);
  }
  if (config.provider === 'kubernetes') {
    const { KubernetesProvider } = await import('./sandbox/kubernetes/KubernetesProvider');
    return new KubernetesProvider(config);
  }
  const { DockerProvider } = await import('./sandbox/docker');
  return new DockerProvider(config);
}

export interface RunningGateway {
  address: string;
  port: number;
  runs: RunManager;
  telemetry: Telemetry;
  /** Where /metrics is served, when metrics.listen is set. */
  metricsAddress?: string;
  /** Stops serving; runs are stopped unless `keepRuns` (or config.docker.keepOnShutdown). */
  close(opts?: { keepRuns?: boolean }): Promise<void>;
}

/** Starts a gateway on config.listen and returns once it accepts calls. */
export async function startGateway(config: GatewayConfig, provider?: SandboxProvider): Promise<RunningGateway> {
  const sandboxes = provider ?? (await createProvider(config));
  const telemetry = await Telemetry.start(config);
  const runs = new RunManager(config, sandboxes, telemetry);
  const recovered = await runs.recover();
  if (recovered.recovered || recovered.removed) logger.info(recovered, 'runs found after restart');
  runs.startSweeper();
  await runs.startPool();

  const server = new Server({
    // Channelz keeps per-call counters and timestamps for an introspection service the
    // gateway does not serve: a cost on every call for nothing.
    'grpc.enable_channelz': 0,
    'grpc.max_receive_message_length': config.maxMessageBytes,
    'grpc.max_send_message_length': config.maxMessageBytes,
    ...(config.maxConcurrentStreams > 0 ? { 'grpc.max_concurrent_streams': config.maxConcurrentStreams } : {}),
  });
  const definition = grpcDefinition(Gateway);
  // Every call's result leaves through this one serializer: written directly, not by reflection.
  definition.callTool.responseSerialize = encodeCallToolOutput as (out: object) => Buffer;
  definition.calls.responseSerialize = encodeCallsOutput as (out: object) => Buffer;
  const calls = new CallsDrain();
  server.addService(definition, gatewayHandlers(runs, new TokenAuthenticator(config.tokens), config, telemetry, calls));

  const health = new HealthImplementation({ '': 'SERVING', [SERVICE_NAME]: 'SERVING' });
  health.addToServer(server);

  const pkg = protoLoader.loadSync(path.join(PROTO_DIR, 'tether/v1/gateway.proto'), { includeDirs: [PROTO_DIR] });
  new ReflectionService(pkg).addToServer(server);

  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(config.listen, ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  const host = config.listen.slice(0, config.listen.lastIndexOf(':'));
  const address = `${host}:${port}`;
  let metricsEndpoint: MetricsEndpoint | undefined;
  if (telemetry.metrics) {
    metricsEndpoint = await serveMetrics(telemetry.metrics, config.metrics.listen);
    logger.info({ address: metricsEndpoint.address }, 'metrics served at /metrics');
  }
  logger.info({ address, provider: sandboxes.name }, 'tether gateway serving');

  let closed = false;
  return {
    address,
    port,
    runs,
    telemetry,
    metricsAddress: metricsEndpoint?.address,
    async close(opts) {
      if (closed) return;
      closed = true;
      health.setStatus('', 'NOT_SERVING');
      calls.drain();
      // In-flight calls get a moment to finish; then they are cut.
      await new Promise<void>((resolve) => {
        const force = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, 3000);
        server.tryShutdown(() => {
          clearTimeout(force);
          resolve();
        });
      });
      // Kubernetes replicas are stateless: a run outlives the replica that created it.
      await runs.close(opts?.keepRuns ?? (config.docker.keepOnShutdown || config.provider === 'kubernetes'));
      await metricsEndpoint?.close();
      await telemetry.tracer?.close();
      await telemetry.audit?.close();
    },
  };
}
