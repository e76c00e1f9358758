import * as path from 'node:path';
import { PassThrough } from 'node:stream';
import { create } from '@bufbuild/protobuf';
import { status, type Metadata, type sendUnaryData, type ServerDuplexStream, type ServerReadableStream, type ServerUnaryCall, type ServerWritableStream, type UntypedServiceImplementation } from '@grpc/grpc-js';
import * as tarStream from 'tar-stream';
import {
  DeleteRunResponseSchema,
  GetFilesResponseSchema,
  ListRunsResponseSchema,
  ListToolsResponseSchema,
  PutFilesResponseSchema,
  ToolSchema,
  type CallToolInput,
  type CallToolOutput,
  type CreateRunRequest,
  type DeleteRunRequest,
  type GetFilesRequest,
  type GetFilesResponse,
  type GetRunRequest,
  type ListRunsRequest,
  type ListToolsRequest,
  type PutFilesRequest,
} from '../../../gen/tether/v1/gateway_pb';
import type { TokenAuthenticator } from '../auth';
import type { GatewayConfig } from '../config';
import { GatewayError, invalid, notFound } from '../errors';
import { logger } from '../log';
import type { RunManager } from '../runs/RunManager';
import { RunnerGoneError } from '../runs/RunnerClient';
import { maxTierOf, tierToProto, visible } from '../surfaces';
import { parseArguments } from '../validation';
import { CallStream } from '../calls/CallStream';
import { ToolAbsentError, ToolInvoker } from '../calls/ToolInvoker';
import { errorResult } from '../calls/results';
import { runToProto, specFromRequest } from './convert';
import { workerHandlers } from '../workers/handlers';

export interface GrpcStatusError {
  code: status;
  details: string;
  metadata?: Metadata;
}

export function toStatus(err: unknown): GrpcStatusError {
  if (err instanceof GatewayError) return { code: err.code, details: err.message, metadata: err.metadata };
  if (err instanceof RunnerGoneError) return { code: status.UNAVAILABLE, details: `the run's runner is gone: ${err.message}` };
  if (err instanceof ToolAbsentError) return { code: status.NOT_FOUND, details: err.message };
  logger.error({ err }, 'internal error');
  return { code: status.INTERNAL, details: `internal error: ${(err as Error)?.message ?? String(err)}` };
}

function unary<Req, Res>(fn: (req: Req, tenant: string) => Promise<Res>, auth: TokenAuthenticator) {
  return (call: ServerUnaryCall<Req, Res>, cb: sendUnaryData<Res>) => {
    let tenant: string;
    try {
      tenant = auth.authenticate(call.metadata);
    } catch (err) {
      return cb(toStatus(err) as any);
    }
    fn(call.request, tenant).then((res) => cb(null, res), (err) => cb(toStatus(err) as any));
  };
}

/** Normalises a workspace-relative path from a request; refuses escapes. */
export function workspaceRelative(p: string): string {
  if (p.includes('\0')) throw invalid('path contains a NUL byte');
  if (path.isAbsolute(p)) throw invalid(`path must be relative to the workspace: ${p}`);
  const norm = path.posix.normalize(p || '.');
  if (norm === '..' || norm.startsWith('../')) throw invalid(`path escapes the workspace: ${p}`);
  return norm === '.' ? '' : norm.replace(/\/$/, '');
}

const GET_CHUNK = 64 * 1024;

export function gatewayHandlers(runs: RunManager, auth: TokenAuthenticator, config: GatewayConfig): UntypedServiceImplementation {
  const invoker = new ToolInvoker();

  return {
    createRun: unary(async (req: CreateRunRequest, tenant) => runToProto(await runs.create(tenant, specFromRequest(req))), auth),
    getRun: unary(async (req: GetRunRequest, tenant) => {
      const run = runs.get(tenant, req.runId);
      return runToProto(run, await runs.usage(run));
    }, auth),
    listRuns: unary(async (_req: ListRunsRequest, tenant) => create(ListRunsResponseSchema, { runs: runs.list(tenant).map((r) => runToProto(r)) }), auth),
    deleteRun: unary(async (req: DeleteRunRequest, tenant) => {
      await runs.delete(tenant, req.runId);
      return create(DeleteRunResponseSchema, {});
    }, auth),

    listTools: unary(async (req: ListToolsRequest, tenant) => {
      const run = runs.ready(tenant, req.runId);
      const cap = maxTierOf(req.surface);
      const tools = run.tools
        .filter((t) => visible(t.tier, cap))
        .map((t) => create(ToolSchema, { name: t.name, description: t.description, tier: tierToProto(t.tier), inputSchemaJson: JSON.stringify(t.inputSchema), parallelSafe: t.parallelSafe }));
      return create(ListToolsResponseSchema, { tools });
    }, auth),

    putFiles: (call: ServerReadableStream<PutFilesRequest, unknown>, cb: sendUnaryData<unknown>) => {
      let tenant: string;
      try {
        tenant = auth.authenticate(call.metadata);
      } catch (err) {
        return cb(toStatus(err) as any);
      }
      let tar: PassThrough | undefined;
      let counted: PassThrough | undefined;
      let done: Promise<void> | undefined;
      let files = 0;
      let bytes = 0;
      let failed = false;
      const fail = (err: unknown) => {
        if (failed) return;
        failed = true;
        tar?.destroy();
        cb(toStatus(err) as any);
      };
      call.on('data', (msg: PutFilesRequest) => {
        if (failed) return;
        try {
          if (msg.msg.case === 'header') {
            if (tar) throw invalid('PutFiles: the header may only be sent once, first');
            const run = runs.ready(tenant, msg.msg.value.runId);
            const rel = workspaceRelative(msg.msg.value.path);
            // Two independent streams: the sandbox may start reading later than the counter.
            tar = new PassThrough();
            counted = new PassThrough();
            const counter = tarStream.extract();
            counter.on('entry', (h, s, next) => {
              if (h.type === 'file') files++;
              s.on('end', next);
              s.resume();
            });
            counter.on('error', () => undefined);
            counted.pipe(counter);
            done = run.sandbox!.putArchive(rel, tar).catch((err: Error) => {
              throw invalid(`PutFiles: the tar stream was refused: ${err.message}`);
            });
            done.catch(fail);
          } else if (msg.msg.case === 'chunk') {
            if (!tar) throw invalid('PutFiles: the first message must be the header');
            bytes += msg.msg.value.length;
            if (bytes > config.maxPutFilesBytes) {
              throw new GatewayError(status.RESOURCE_EXHAUSTED, `PutFiles: the archive is larger than the ${config.maxPutFilesBytes}-byte limit; send it in parts`);
            }
            counted!.write(msg.msg.value);
            if (!tar.write(msg.msg.value)) {
              call.pause();
              tar.once('drain', () => call.resume());
            }
          }
        } catch (err) {
          fail(err);
        }
      });
      call.on('end', () => {
        if (failed) return;
        if (!tar || !done) return fail(invalid('PutFiles: no header was sent'));
        tar.end();
        counted!.end();
        done.then(() => !failed && cb(null, create(PutFilesResponseSchema, { filesWritten: files, bytesWritten: BigInt(bytes) })), fail);
      });
      call.on('error', fail);
    },

    getFiles: (call: ServerWritableStream<GetFilesRequest, GetFilesResponse>) => {
      const run = async () => {
        const tenant = auth.authenticate(call.metadata);
        // A FAILED run's workspace is still there until DeleteRun: its work can be taken out.
        const r = runs.get(tenant, call.request.runId);
        if (!r.sandbox || r.state === 'STOPPED' || r.state === 'STARTING') {
          throw new GatewayError(status.FAILED_PRECONDITION, `run ${r.runId} is ${r.state.toLowerCase()}: its workspace cannot be read`);
        }
        const rel = workspaceRelative(call.request.path);
        let tar;
        try {
          tar = await r.sandbox!.getArchive(rel);
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
      };
      run().catch((err) => call.emit('error', Object.assign(new Error(toStatus(err).details), toStatus(err))));
    },

    callTool: (call: ServerDuplexStream<CallToolInput, CallToolOutput>) => {
      let stream: CallStream | undefined;
      const abortWith = (err: unknown) => {
        const s = toStatus(err);
        stream?.dispose();
        if (!call.destroyed) call.emit('error', Object.assign(new Error(s.details), s));
      };
      call.on('data', (msg: CallToolInput) => {
        if (stream) return stream.receive(msg);
        if (msg.msg.case !== 'start') return abortWith(invalid('CallTool: the first message must be start'));
        const start = msg.msg.value;
        void (async () => {
          try {
            const tenant = auth.authenticate(call.metadata);
            runs.tenancy.limitRate(tenant, 'callTool');
            const run = runs.ready(tenant, start.runId);
            stream = new CallStream(call, start, run.spec.features.questions.targetSpace, config.questions.timeoutSeconds);
            const cap = maxTierOf(start.surface);
            const desc = run.tool(start.tool);
            if (!desc || !visible(desc.tier, cap)) throw new ToolAbsentError(start.tool);
            const parsed = parseArguments(start.argumentsJson);
            if (!parsed.ok) return stream.finish(errorResult(parsed.error));
            const started = Date.now();
            const result = await invoker.invoke(run, start.tool, parsed.value, { cap, stream });
            logger.debug({ runId: run.runId, tool: start.tool, callId: start.callId, ms: Date.now() - started, isError: !!result.isError }, 'call');
            stream.finish(result);
          } catch (err) {
            abortWith(err);
          }
        })();
      });
      call.on('end', () => stream?.inputEnded());
      call.on('error', () => stream?.cancel('the stream failed'));
    },

    ...workerHandlers(runs, auth, toStatus),
  };
}
