import * as path from 'node:path';
import { Server, ServerCredentials } from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { ReflectionService } from '@grpc/reflection';
import { HealthImplementation } from 'grpc-health-check';
import { Gateway, type CallToolStart, type ToolResult } from '@tether/contract';
import { encodeCallsOutput, encodeCallToolOutput } from './grpc/resultWire';
import { CallsDrain } from './grpc/calls';
import { TokenAuthenticator } from './auth';
import type { GatewayConfig } from './config';
import { logger } from './log';
import { RunLifecycle } from './runs/RunLifecycle';
import { PausedStore } from './runs/PausedStore';
import { RunPauses } from './runs/RunPauses';
import { RunRecovery } from './runs/RunRecovery';
import { RunRegistry } from './runs/RunRegistry';
import { grpcDefinition } from '@tether/contract/grpc';
import { gatewayHandlers } from './grpc/handlers';
import { gatewayMethods } from './grpc/methods';
import { localContext } from './grpc/streams';
import { ConnectEdge } from './http/connectEdge';
import { connectGateway } from './http/gateway';
import { HttpListener } from './http/listener';
import { E2bSurface } from './e2b/surface';
import { ProcessService } from './processes/ProcessService';
import { createProvider } from './sandbox';
import type { SandboxProvider } from './sandbox/provider';
import { serveMetrics, type MetricsEndpoint } from './observability/metricsServer';
import { Telemetry } from './observability/Telemetry';
import { EgressService } from './egress/service';
import { ClaimStore } from './pool/ClaimStore';
import { RunPool } from './pool/RunPool';
import { TemplateCatalog } from './templates/catalog';
import { TemplateSnapshots } from './warmStarts/TemplateSnapshots';
import { Tenancy } from './tenancy/Tenancy';

export const SERVICE_NAME = 'tether.v1.Gateway';
export const PROTO_DIR = path.resolve(__dirname, '../../../proto');

/**
 * The run machinery, each part made once here and handed to the parts that need it: data flows
 * from the gRPC handlers to the lifecycle and recovery, and from them to the registry.
 */
export interface GatewayRuns {
  /** The runs this gateway knows; every lookup scoped by tenant. */
  registry: RunRegistry;
  lifecycle: RunLifecycle;
  /** Pause and resume, and the resume a call for a paused run sets off. */
  pauses: RunPauses;
  /** CreateRun's way in: from a template's warmed snapshot where one fits, else as `lifecycle` starts runs. */
  snapshots: TemplateSnapshots;
  recovery: RunRecovery;
  pool: RunPool;
  tenancy: Tenancy;
  egress: EgressService;
  /** Processes of the runs (StartProcess and the rest), one instance for every transport. */
  processes: ProcessService;
  /** Graceful shutdown: stops every run (or leaves them running for the next gateway), then the provider. */
  close(keep: boolean): Promise<void>;
}

/** Makes the run machinery for a provider; nothing starts until recovery, the sweeper and the pool are started. */
export function assembleRuns(
  config: GatewayConfig,
  provider: SandboxProvider,
  telemetry: Telemetry = Telemetry.off,
): GatewayRuns {
  const tenancy = new Tenancy(config.tenancy, config.runs.maxPerTenant);
  tenancy.onRefusals((r) => telemetry.rateLimited(r));
  const templates = new TemplateCatalog(config, provider.capabilities.templateImages);
  const egress = new EgressService(config, (r) => telemetry.egress(r));
  const claims = new ClaimStore(path.join(config.stateDir, 'pool', config.instance, 'claims'));
  const paused = new PausedStore(provider.pausedRecords ?? path.join(config.stateDir, 'paused', config.instance));
  const registry = new RunRegistry(provider);
  const pool = new RunPool({ config, provider, tenancy, templates });
  const lifecycle = new RunLifecycle({
    config,
    provider,
    registry,
    tenancy,
    templates,
    egress,
    claims,
    paused,
    pool,
    telemetry,
  });
  const pauses = new RunPauses({
    config,
    provider,
    registry,
    lifecycle,
    tenancy,
    templates,
    egress,
    claims,
    paused,
    telemetry,
  });
  const recovery = new RunRecovery({ config, provider, registry, lifecycle, egress, claims, paused, pool });
  // A process of a paused run resumes it first, as a call does.
  const processes = new ProcessService({ ready: (tenant, runId) => pauses.whenReady(tenant, runId) });
  const snapshots = new TemplateSnapshots({ config, lifecycle, pauses, registry, templates, processes });
  telemetry.watchRuns({
    states: () => registry.all().map((r) => [r.tenant, r.state] as const),
    usage: () => registry.usageByTenant(),
    resources: () => registry.all().flatMap((r) => (r.live ? (r.resources ?? []) : [])),
    pool: () => pool.stats(),
    ...(provider.backendRequests ? { backendRequests: () => provider.backendRequests!() } : {}),
  });
  return {
    registry,
    lifecycle,
    pauses,
    recovery,
    pool,
    tenancy,
    egress,
    processes,
    snapshots,
    async close(keep) {
      snapshots.close();
      recovery.stopDiscovery();
      tenancy.flushRefusals();
      await pool.close(keep);
      await pauses.close();
      await lifecycle.close(keep);
      await egress.closeAll(keep);
      await provider.close();
    },
  };
}

export interface RunningGateway {
  address: string;
  port: number;
  /** Where the HTTP listener serves (Connect, HTTP/JSON, registered routes), when http.listen is set. */
  httpAddress?: string;
  /** The HTTP listener, to register routes on. */
  http?: HttpListener;
  /** The runs this gateway knows (find them by tenant and id). */
  runs: RunRegistry;
  lifecycle: RunLifecycle;
  pool: RunPool;
  tenancy: Tenancy;
  telemetry: Telemetry;
  /** The runs' processes, as StartProcess and the rest reach them. */
  processes: ProcessService;
  /** One tool call answered once, as InvokeTool answers it (the same gate, quotas, audit and metrics). */
  invokeTool(tenant: string, start: CallToolStart, signal?: AbortSignal): Promise<ToolResult>;
  /** Where /metrics is served, when metrics.listen is set. */
  metricsAddress?: string;
  /** Stops serving; runs are stopped unless `keepRuns` (or the provider keeps runs on shutdown). */
  close(opts?: { keepRuns?: boolean }): Promise<void>;
}

/** Starts a gateway on config.listen (and http.listen) and returns once it accepts calls. */
export async function startGateway(config: GatewayConfig, given?: SandboxProvider): Promise<RunningGateway> {
  const provider = given ?? (await createProvider(config));
  const telemetry = await Telemetry.start(config);
  const runs = assembleRuns(config, provider, telemetry);
  const recovered = await runs.recovery.recover();
  if (recovered.recovered || recovered.removed || recovered.left || recovered.paused)
    logger.info(recovered, 'runs found after restart');
  const snapshotsLeft = await runs.snapshots.dropLeftovers();
  if (snapshotsLeft) logger.info({ removed: snapshotsLeft }, 'template snapshots of an earlier gateway removed');
  runs.lifecycle.startSweeper();
  runs.pauses.startSweeper();
  await runs.recovery.startDiscovery();
  await runs.pool.start();

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
  const auth = new TokenAuthenticator(config.tokens);
  // Every RPC's logic once; the gRPC edge and the Connect edge both serve it.
  const methods = gatewayMethods(runs, config, telemetry, calls);
  server.addService(definition, gatewayHandlers(methods, auth, telemetry));

  const health = new HealthImplementation({ '': 'SERVING', [SERVICE_NAME]: 'SERVING' });
  health.addToServer(server);

  const pkg = protoLoader.loadSync(path.join(PROTO_DIR, 'tether/v1/gateway.proto'), { includeDirs: [PROTO_DIR] });
  new ReflectionService(pkg).addToServer(server);

  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(config.listen, ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  const host = config.listen.slice(0, config.listen.lastIndexOf(':'));
  const address = `${host}:${port}`;
  let http: HttpListener | undefined;
  if (config.http.listen && config.http.listen !== 'off') {
    try {
      http = await HttpListener.start({
        listen: config.http.listen,
        gateway: connectGateway(methods, new ConnectEdge(auth, telemetry), config),
        maxConcurrentStreams: config.maxConcurrentStreams,
      });
      if (config.e2b.enabled)
        http.register(
          new E2bSurface(
            runs,
            auth,
            runs.processes,
            (tenant, start) => methods.invokeTool(start, tenant, localContext()),
            {
              accessTokenKey: config.e2b.accessTokenKey || undefined,
              maxFileBytes: config.e2b.maxFileBytes,
              maxMessageBytes: config.maxMessageBytes,
            },
          ),
        );
    } catch (err) {
      server.forceShutdown();
      await runs.close(provider.capabilities.keepsRunsOnShutdown);
      await telemetry.tracer?.close();
      await telemetry.audit?.close();
      throw new Error(`cannot serve HTTP on ${config.http.listen} (http.listen): ${(err as Error).message}`);
    }
  }
  let metricsEndpoint: MetricsEndpoint | undefined;
  if (telemetry.metrics) {
    metricsEndpoint = await serveMetrics(telemetry.metrics, config.metrics.listen);
    logger.info({ address: metricsEndpoint.address }, 'metrics served at /metrics');
  }
  logger.info({ address, ...(http ? { http: http.address } : {}), provider: provider.name }, 'tether gateway serving');

  let closed = false;
  return {
    address,
    port,
    httpAddress: http?.address,
    http,
    runs: runs.registry,
    lifecycle: runs.lifecycle,
    pool: runs.pool,
    tenancy: runs.tenancy,
    telemetry,
    processes: runs.processes,
    invokeTool: (tenant, start, signal) => methods.invokeTool(start, tenant, localContext(signal)),
    metricsAddress: metricsEndpoint?.address,
    async close(opts) {
      if (closed) return;
      closed = true;
      health.setStatus('', 'NOT_SERVING');
      calls.drain();
      // In-flight calls get a moment to finish; then they are cut.
      await Promise.all([
        new Promise<void>((resolve) => {
          const force = setTimeout(() => {
            server.forceShutdown();
            resolve();
          }, 3000);
          server.tryShutdown(() => {
            clearTimeout(force);
            resolve();
          });
        }),
        http?.close(3000),
      ]);
      await runs.close(opts?.keepRuns ?? provider.capabilities.keepsRunsOnShutdown);
      await metricsEndpoint?.close();
      await telemetry.tracer?.close();
      await telemetry.audit?.close();
    },
  };
}
