import { create } from '@bufbuild/protobuf';
import { status } from '@grpc/grpc-js';
import {
  DeleteRunResponseSchema,
  ForkRunResponseSchema,
  GetFilesResponseSchema,
  ListRunsResponseSchema,
  ListToolsResponseSchema,
  ToolSchema,
} from '@tether/contract';
import { ToolInvoker } from '../calls/ToolInvoker';
import type { GatewayConfig } from '../config';
import type { EgressService } from '../egress/service';
import { egressPageToProto } from '../egress/proto';
import { GatewayError, notFound } from '../errors';
import type { Telemetry } from '../observability/Telemetry';
import type { ProcessService } from '../processes/ProcessService';
import type { RunLifecycle } from '../runs/RunLifecycle';
import type { RunPauses } from '../runs/RunPauses';
import type { RunRegistry } from '../runs/RunRegistry';
import { maxTierOf, tierToProto, visible } from '../surfaces';
import type { TemplateSnapshots } from '../warmStarts/TemplateSnapshots';
import type { Tenancy } from '../tenancy/Tenancy';
import { workerMethods } from '../workers/handlers';
import { FilesArrivedCommand } from '../../../protocol/src/workspace';
import type { CallDeps } from './callDriver';
import { serveCallTool } from './callTool';
import { serveCalls, type CallsDrain } from './calls';
import { runToProto, specFromRequest } from './convert';
import { invokeTool } from './invokeTool';
import { processMethods } from './processes';
import { receivePutFiles } from './putFiles';
import type { GatewayMethods } from './streams';
import { workspaceRelative } from './workspacePath';

const GET_CHUNK = 64 * 1024;

/** What the RPCs act on: the runs to find, their lifecycle, the tenants' limits, the egress logs and the processes. */
export interface MethodRuns {
  registry: RunRegistry;
  lifecycle: RunLifecycle;
  pauses: RunPauses;
  snapshots: Pick<TemplateSnapshots, 'create'>;
  tenancy: Tenancy;
  egress: Pick<EgressService, 'read'>;
  processes: ProcessService;
}

/**
 * The logic of every RPC of tether.v1.Gateway, once, free of any transport: each gets the
 * request (or its stream), the caller's tenant and its context, and answers or throws a
 * GatewayError. The gRPC edge (`edge.ts`, `handlers.ts`) and the Connect edge (`http/`)
 * authenticate the caller, run these, and answer in their protocol.
 */
export function gatewayMethods(
  { registry, lifecycle, pauses, snapshots, tenancy, egress, processes }: MethodRuns,
  config: GatewayConfig,
  telemetry: Telemetry,
  drain: CallsDrain,
): GatewayMethods {
  const callDeps: CallDeps = {
    // A call for a paused run resumes it; the caller only waits.
    runs: { ready: (tenant: string, runId: string) => pauses.whenReady(tenant, runId) },
    tenancy,
    invoker: new ToolInvoker(),
    questionTimeoutSeconds: config.questions.timeoutSeconds,
    telemetry,
  };

  return {
    createRun: async (req, tenant) => runToProto(await snapshots.create(tenant, specFromRequest(req))),

    async getRun(req, tenant) {
      const run = registry.get(tenant, req.runId);
      return runToProto(run, await registry.usage(run));
    },

    listRuns: async (_req, tenant) =>
      create(ListRunsResponseSchema, { runs: registry.list(tenant).map((r) => runToProto(r)) }),

    getEgressLog: async (req, tenant) =>
      egressPageToProto(
        await egress.read(tenant, { runId: req.runId, pageSize: req.pageSize, pageToken: req.pageToken }),
      ),

    pauseRun: async (req, tenant) => runToProto(await pauses.pause(tenant, req.runId)),

    resumeRun: async (req, tenant) => runToProto(await pauses.resume(tenant, req.runId)),

    forkRun: async (req, tenant) =>
      create(ForkRunResponseSchema, {
        runs: (await pauses.fork(tenant, req.runId, req.count)).map((r) => runToProto(r)),
      }),

    async deleteRun(req, tenant) {
      await lifecycle.delete(tenant, req.runId);
      return create(DeleteRunResponseSchema, {});
    },

    async listTools(req, tenant) {
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
    },

    async putFiles(input, tenant) {
      let arrived: { runId: string; path: string } | undefined;
      const res = await receivePutFiles(
        input,
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
    },

    async getFiles(req, tenant, sink) {
      // A FAILED run's workspace is still there until DeleteRun: its work can be taken out.
      // A paused run's is read through its resumed sandbox.
      if (registry.get(tenant, req.runId).state === 'PAUSED') await pauses.whenReady(tenant, req.runId);
      const r = registry.get(tenant, req.runId);
      const sandbox = r.sandbox;
      if (!sandbox || r.state === 'STOPPED' || r.state === 'STARTING') {
        throw new GatewayError(
          status.FAILED_PRECONDITION,
          `run ${r.runId} is ${r.state.toLowerCase()}: its workspace cannot be read`,
        );
      }
      const rel = workspaceRelative(req.path);
      let tar;
      try {
        tar = await sandbox.getArchive(rel);
      } catch (err) {
        throw notFound(`no such path in the workspace: ${req.path || '.'} (${(err as Error).message})`);
      }
      for await (const chunk of tar) {
        const buf = chunk as Buffer;
        for (let i = 0; i < buf.length; i += GET_CHUNK) {
          // The client went away: leaving the loop closes the archive.
          if (sink.signal.aborted) return;
          await sink.send(create(GetFilesResponseSchema, { chunk: buf.subarray(i, i + GET_CHUNK) }));
        }
      }
    },

    callTool: {
      // The tenant's CallTool rate, checked when the stream opens, before its request is read.
      refuse: (tenant) => tenancy.refusal(tenant, 'callTool'),
      serve: (stream, tenant, fail) => serveCallTool(stream, tenant, fail, callDeps),
    },
    // Rate limits apply per call (each start), so the stream itself is only authenticated.
    calls: { serve: (stream, tenant, fail) => serveCalls(stream, tenant, fail, callDeps, drain) },

    invokeTool: (start, tenant, ctx) => invokeTool(callDeps, start, tenant, ctx),

    ...processMethods(processes),
    ...workerMethods(registry),
  };
}
