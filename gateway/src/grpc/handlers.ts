import { create } from '@bufbuild/protobuf';
import { status, type ServerWritableStream, type UntypedServiceImplementation } from '@grpc/grpc-js';
import {
  DeleteRunResponseSchema,
  ForkRunResponseSchema,
  GetFilesResponseSchema,
  ListRunsResponseSchema,
  ListToolsResponseSchema,
  ToolSchema,
  type CreateRunRequest,
  type DeleteRunRequest,
  type ForkRunRequest,
  type GetFilesRequest,
  type GetEgressLogRequest,
  type GetFilesResponse,
  type GetRunRequest,
  type ListRunsRequest,
  type ListToolsRequest,
  type PauseRunRequest,
  type ResumeRunRequest,
} from '@tether/contract';
import type { TokenAuthenticator } from '../auth';
import type { Telemetry } from '../observability/Telemetry';
import type { GatewayConfig } from '../config';
import { GatewayError, notFound } from '../errors';
import type { EgressService } from '../egress/service';
import type { RunLifecycle } from '../runs/RunLifecycle';
import type { RunPauses } from '../runs/RunPauses';
import type { RunRegistry } from '../runs/RunRegistry';
import type { Tenancy } from '../tenancy/Tenancy';
import { maxTierOf, tierToProto, visible } from '../surfaces';
import { ToolInvoker } from '../calls/ToolInvoker';
import { workerHandlers } from '../workers/handlers';
import { egressPageToProto } from '../egress/proto';
import { serveCallTool } from './callTool';
import { serveCalls, type CallsDrain } from './calls';
import { runToProto, specFromRequest } from './convert';
import { Edge } from './edge';
import { FilesArrivedCommand } from '../../../protocol/src/workspace';
import { receivePutFiles } from './putFiles';
import { workspaceRelative } from './workspacePath';

const GET_CHUNK = 64 * 1024;

/** What the handlers act on: the runs to find, their lifecycle, the tenants' limits and the egress logs. */
export interface HandlerRuns {
  registry: RunRegistry;
  lifecycle: RunLifecycle;
  pauses: RunPauses;
  tenancy: Tenancy;
  egress: Pick<EgressService, 'read'>;
}

export function gatewayHandlers(
  { registry, lifecycle, pauses, tenancy, egress }: HandlerRuns,
  auth: TokenAuthenticator,
  config: GatewayConfig,
  telemetry: Telemetry,
  drain: CallsDrain,
): UntypedServiceImplementation {
  const edge = new Edge(auth, telemetry);
  const callDeps = {
    // A call for a paused run resumes it; the caller only waits.
    runs: { ready: (tenant: string, runId: string) => pauses.whenReady(tenant, runId) },
    tenancy,
    invoker: new ToolInvoker(),
    questionTimeoutSeconds: config.questions.timeoutSeconds,
    telemetry,
  };

  return {
    createRun: edge.unary(async (req: CreateRunRequest, tenant) =>
      runToProto(await lifecycle.create(tenant, specFromRequest(req))),
    ),
    getRun: edge.unary(async (req: GetRunRequest, tenant) => {
      const run = registry.get(tenant, req.runId);
      return runToProto(run, await registry.usage(run));
    }),
    listRuns: edge.unary(async (_req: ListRunsRequest, tenant) =>
      create(ListRunsResponseSchema, { runs: registry.list(tenant).map((r) => runToProto(r)) }),
    ),
    getEgressLog: edge.unary(async (req: GetEgressLogRequest, tenant) =>
      egressPageToProto(
        await egress.read(tenant, { runId: req.runId, pageSize: req.pageSize, pageToken: req.pageToken }),
      ),
    ),
    pauseRun: edge.unary(async (req: PauseRunRequest, tenant) => runToProto(await pauses.pause(tenant, req.runId))),
    resumeRun: edge.unary(async (req: ResumeRunRequest, tenant) => runToProto(await pauses.resume(tenant, req.runId))),
    forkRun: edge.unary(async (req: ForkRunRequest, tenant) =>
      create(ForkRunResponseSchema, {
        runs: (await pauses.fork(tenant, req.runId, req.count)).map((r) => runToProto(r)),
      }),
    ),
    deleteRun: edge.unary(async (req: DeleteRunRequest, tenant) => {
      await lifecycle.delete(tenant, req.runId);
      return create(DeleteRunResponseSchema, {});
    }),

    listTools: edge.unary(async (req: ListToolsRequest, tenant) => {
      const run = registry.ready(tenant, req.runId);
      const cap = maxTierOf(req.surface);
      const tools = run.tools
        .filter((t) => visible(t.tier, cap))
        .map((t) =>
          create(ToolSchema, {
            name: t.name,
            description: t.description,
            tier: tierToProto(t.tier),
            inputSchemaJson: JSON.stringify(t.inputSchema),
            parallelSafe: t.parallelSafe,
          }),
        );
      return create(ListToolsResponseSchema, { tools });
    }),

    putFiles: edge.clientStream(async (call, tenant) => {
      let arrived: { runId: string; path: string } | undefined;
      const res = await receivePutFiles(
        call,
        async (header) => {
          const { runId, sandbox } = await pauses.whenReady(tenant, header.runId);
          const relDir = workspaceRelative(header.path);
          arrived = { runId, path: relDir || '.' };
          return { sandbox, relDir };
        },
        config.maxPutFilesBytes,
      );
      // Lets the runner index the new files in the background; best effort, never awaited.
      if (arrived) {
        try {
          registry
            .ready(tenant, arrived.runId)
            .runner.command(FilesArrivedCommand.type, { path: arrived.path })
            .catch(() => undefined);
        } catch {
          // the run stopped meanwhile
        }
      }
      return res;
    }),

    getFiles: edge.serverStream(async (call: ServerWritableStream<GetFilesRequest, GetFilesResponse>, tenant) => {
      // A FAILED run's workspace is still there until DeleteRun: its work can be taken out.
      // A paused run's is read through its resumed sandbox.
      if (registry.get(tenant, call.request.runId).state === 'PAUSED')
        await pauses.whenReady(tenant, call.request.runId);
      const r = registry.get(tenant, call.request.runId);
      const sandbox = r.sandbox;
      if (!sandbox || r.state === 'STOPPED' || r.state === 'STARTING') {
        throw new GatewayError(
          status.FAILED_PRECONDITION,
          `run ${r.runId} is ${r.state.toLowerCase()}: its workspace cannot be read`,
        );
      }
      const rel = workspaceRelative(call.request.path);
      let tar;
      try {
        tar = await sandbox.getArchive(rel);
      } catch (err) {
        throw notFound(`no such path in the workspace: ${call.request.path || '.'} (${(err as Error).message})`);
      }
      for await (const chunk of tar) {
        const buf = chunk as Buffer;
        for (let i = 0; i < buf.length; i += GET_CHUNK) {
          if (!call.write(create(GetFilesResponseSchema, { chunk: buf.subarray(i, i + GET_CHUNK) }))) {
            await new Promise((res) => call.once('drain', res));
          }
        }
      }
      call.end();
    }),

    callTool: edge.gatedBidi(
      (tenant) => tenancy.refusal(tenant, 'callTool'),
      (call, tenant, fail) => serveCallTool(call, tenant, fail, callDeps),
    ),
    // Rate limits apply per call (each start), so the stream itself is only authenticated.
    calls: edge.gatedBidi(
      () => undefined,
      (call, tenant, fail) => serveCalls(call, tenant, fail, callDeps, drain),
    ),

    ...workerHandlers(registry, edge),
  };
}
