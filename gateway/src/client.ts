import { Readable } from 'node:stream';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import * as tarStream from 'tar-stream';
import {
  AnswerSchema,
  BridgeResultSchema,
  CallToolInputSchema,
  CreateRunRequestSchema,
  Gateway,
  type BridgeCall,
  type CallToolOutput,
  type CreateRunRequest,
  type ListRunsResponse,
  type ListToolsResponse,
  type PutFilesResponse,
  type Question,
  type Run,
  type Surface,
  type Tool,
  type ToolResult,
  type WorkerEvent,
  type ReportWorkerRequest,
} from '../../gen/tether/v1/gateway_pb';
import { grpcDefinition } from './grpc/definition';

export type AnswerInit = MessageInitShape<typeof AnswerSchema>;
export type ToolResultInit = MessageInitShape<typeof import('../../gen/tether/v1/gateway_pb').ToolResultSchema>;

export interface CallOptions {
  surface?: MessageInitShape<typeof import('../../gen/tether/v1/gateway_pb').SurfaceSchema>;
  callId?: string;
  /** Declares a human is connected; onQuestion answers the cards. */
  onQuestion?: (q: Question) => Promise<AnswerInit> | AnswerInit;
  /** Declares the client runs tools the gateway does not own. */
  onBridgeCall?: (b: BridgeCall) => Promise<ToolResultInit> | ToolResultInit;
  onProgress?: (text: string) => void;
  signal?: AbortSignal;
  deadlineMs?: number;
}

export interface CallOutcome {
  result: ToolResult;
  progress: string[];
  questions: Question[];
  bridgeCalls: BridgeCall[];
}

/** Joins a tool result's text content. */
export function resultText(r: ToolResult): string {
  return r.content.map((c) => (c.item.case === 'text' ? c.item.value : c.item.case === 'json' ? c.item.value : '')).filter(Boolean).join('\n');
}

const Ctor = grpc.makeGenericClientConstructor(grpcDefinition(Gateway), 'Gateway');

/** A small typed client for tether's gRPC contract; the CLI, the tests and the benches use it. */
export class TetherClient {
  readonly raw: InstanceType<typeof Ctor>;
  private readonly meta: grpc.Metadata;

  constructor(address: string, token: string, options: grpc.ClientOptions = {}) {
    this.raw = new Ctor(address, grpc.credentials.createInsecure(), {
      'grpc.max_receive_message_length': 64 * 1024 * 1024,
      'grpc.max_send_message_length': 64 * 1024 * 1024,
      ...options,
    });
    this.meta = new grpc.Metadata();
    this.meta.set('authorization', `Bearer ${token}`);
  }

  private unary<T>(method: string, req: unknown): Promise<T> {
    return new Promise((resolve, reject) => this.raw[method](req, this.meta, (err: grpc.ServiceError | null, res: T) => (err ? reject(err) : resolve(res))));
  }

  createRun(init: MessageInitShape<typeof CreateRunRequestSchema> = {}): Promise<Run> {
    return this.unary('createRun', create(CreateRunRequestSchema, init) as CreateRunRequest);
  }
  getRun(runId: string): Promise<Run> {
    return this.unary('getRun', { $typeName: 'tether.v1.GetRunRequest', runId });
  }
  async listRuns(): Promise<Run[]> {
    return (await this.unary<ListRunsResponse>('listRuns', { $typeName: 'tether.v1.ListRunsRequest' })).runs;
  }
  async deleteRun(runId: string): Promise<void> {
    await this.unary('deleteRun', { $typeName: 'tether.v1.DeleteRunRequest', runId });
  }
  async listTools(runId: string, surface?: CallOptions['surface']): Promise<Tool[]> {
    const req = { $typeName: 'tether.v1.ListToolsRequest', runId, surface: surface ? { $typeName: 'tether.v1.Surface', mode: 0, agent: 0, ...surface } : undefined };
    return (await this.unary<ListToolsResponse>('listTools', req)).tools;
  }

  /** Sends a tar stream (or buffer) to be unpacked at a workspace-relative directory. */
  putFiles(runId: string, tar: Buffer | Readable, path = ''): Promise<PutFilesResponse> {
    return new Promise((resolve, reject) => {
      const call = this.raw.putFiles(this.meta, (err: grpc.ServiceError | null, res: PutFilesResponse) => (err ? reject(err) : resolve(res)));
      call.write({ $typeName: 'tether.v1.PutFilesRequest', msg: { case: 'header', value: { $typeName: 'tether.v1.PutFilesHeader', runId, path } } });
      const src = Buffer.isBuffer(tar) ? Readable.from([tar]) : tar;
      (async () => {
        for await (const chunk of src) {
          const buf = chunk as Buffer;
          for (let i = 0; i < buf.length; i += 256 * 1024) {
            call.write({ $typeName: 'tether.v1.PutFilesRequest', msg: { case: 'chunk', value: buf.subarray(i, i + 256 * 1024) } });
          }
        }
        call.end();
      })().catch((e) => call.destroy(e));
    });
  }

  /** Convenience: writes a map of path → content into the workspace. */
  async putFileMap(runId: string, files: Record<string, string | Buffer>, mode = 0o644): Promise<PutFilesResponse> {
    return this.putFiles(runId, await tarOf(files, mode));
  }

  getFiles(runId: string, path = ''): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      const call = this.raw.getFiles({ $typeName: 'tether.v1.GetFilesRequest', runId, path }, this.meta);
      call.on('data', (m: { chunk: Uint8Array }) => chunks.push(Buffer.from(m.chunk)));
      call.on('end', () => resolve(Buffer.concat(chunks)));
      call.on('error', reject);
    });
  }

  /** Runs one tool call to its result, answering cards and bridged calls with the given handlers. */
  callTool(runId: string, tool: string, args: unknown, opts: CallOptions = {}): Promise<CallOutcome> {
    const callOpts: grpc.CallOptions = opts.deadlineMs ? { deadline: Date.now() + opts.deadlineMs } : {};
    const call = this.raw.callTool(this.meta, callOpts) as grpc.ClientDuplexStream<unknown, CallToolOutput>;
    const outcome: Omit<CallOutcome, 'result'> = { progress: [], questions: [], bridgeCalls: [] };
    return new Promise<CallOutcome>((resolve, reject) => {
      let result: ToolResult | undefined;
      const send = (msg: MessageInitShape<typeof CallToolInputSchema>['msg']) => {
        if (!call.writableEnded && !call.destroyed) call.write(create(CallToolInputSchema, { msg }));
      };
      opts.signal?.addEventListener('abort', () => send({ case: 'cancel', value: { reason: String(opts.signal?.reason ?? 'cancelled') } }), { once: true });
      call.on('data', (out: CallToolOutput) => {
        switch (out.msg.case) {
          case 'progress':
            outcome.progress.push(out.msg.value.text);
            opts.onProgress?.(out.msg.value.text);
            break;
          case 'question': {
            const q = out.msg.value;
            outcome.questions.push(q);
            if (opts.onQuestion) Promise.resolve(opts.onQuestion(q)).then((a) => send({ case: 'answer', value: create(AnswerSchema, { ...a, questionId: q.id }) }));
            break;
          }
          case 'bridgeCall': {
            const b = out.msg.value;
            outcome.bridgeCalls.push(b);
            if (opts.onBridgeCall) {
              Promise.resolve(opts.onBridgeCall(b)).then((r) => send({ case: 'bridgeResult', value: create(BridgeResultSchema, { bridgeId: b.bridgeId, result: r }) }));
            }
            break;
          }
          case 'result':
            result = out.msg.value;
            break;
        }
      });
      call.on('error', reject);
      call.on('end', () => {
        if (result) resolve({ ...outcome, result });
        else reject(new Error('the stream ended without a result'));
      });
      send({
        case: 'start',
        value: {
          runId,
          callId: opts.callId ?? '',
          tool,
          argumentsJson: typeof args === 'string' ? args : JSON.stringify(args ?? {}),
          surface: opts.surface,
          acceptsQuestions: !!opts.onQuestion,
          acceptsBridgeCalls: !!opts.onBridgeCall,
        },
      });
    }).finally(() => {
      if (!call.writableEnded) call.end();
    });
  }

  watchWorkers(runId: string): grpc.ClientReadableStream<WorkerEvent> {
    return this.raw.watchWorkers({ $typeName: 'tether.v1.WatchWorkersRequest', runId }, this.meta);
  }

  reportWorker(req: Omit<ReportWorkerRequest, '$typeName'>): Promise<void> {
    return this.unary('reportWorker', { $typeName: 'tether.v1.ReportWorkerRequest', ...req });
  }

  close(): void {
    this.raw.close();
  }
}

export type { Surface };

/** Builds a tar archive from a map of path → content. */
export async function tarOf(files: Record<string, string | Buffer>, mode = 0o644): Promise<Buffer> {
  const pack = tarStream.pack();
  for (const [name, content] of Object.entries(files)) {
    pack.entry({ name, mode }, typeof content === 'string' ? Buffer.from(content) : content);
  }
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}
