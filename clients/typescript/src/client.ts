import type { Readable } from 'node:stream';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import {
  CallToolStartSchema,
  CreateRunRequestSchema,
  ProcessSignal,
  StartProcessRequestSchema,
  type CallToolInputSchema,
  GetEgressLogRequestSchema,
  ReportWorkerRequestSchema,
  SurfaceSchema,
  type CallToolInput,
  type CallToolOutput,
  type EgressRecord,
  type GetEgressLogResponse,
  type GetFilesResponse,
  type ForkRunResponse,
  type ListRunsResponse,
  type ListProcessesResponse,
  type ListToolsResponse,
  type ProcessEvent,
  type ProcessInfo,
  type PutFilesResponse,
  type ReportWorkerRequest,
  type Run,
  type Tool,
  type ToolResult,
  type WorkerEvent,
} from '@tether/contract';
import { abortReason, driveCall, streamChannel, type CallOptions, type CallOutcome, type SurfaceInit } from './call';
import { SharedCalls } from './sharedCalls';
import { gatewayDefinition } from '@tether/contract/grpc';
import { isTetherError, TetherError } from './errors';
import { extractTo, tarOf, tarOfFolder, untar, type FileMap } from './files';
import { healthChecker } from './health';
import { resultStructured, resultText } from './results';
import { VERSION } from './version';

export type CreateRunInit = MessageInitShape<typeof CreateRunRequestSchema>;
export type EgressLogQuery = MessageInitShape<typeof GetEgressLogRequestSchema>;
export type StartProcessInit = MessageInitShape<typeof StartProcessRequestSchema>;
/** A signal for SignalProcess: the enum, or its name. */
export type ProcessSignalInit = ProcessSignal | 'SIGKILL' | 'SIGTERM' | 'SIGINT' | 'SIGHUP';

export interface ClientOptions {
  /** Channel credentials; plaintext by default (tether listens on loopback or a private network). */
  credentials?: grpc.ChannelCredentials;
  /** grpc-js channel options, merged over 64 MiB message limits. */
  channelOptions?: grpc.ClientOptions;
  /**
   * Carry every tool call on one shared Calls stream (default), or give each call a CallTool
   * stream of its own (false). The shared stream saves each call a stream's setup; calls
   * behave the same either way.
   */
  multiplex?: boolean;
}

export interface RequestOptions {
  /** Aborting hangs up: the request rejects with CANCELLED. */
  signal?: AbortSignal;
  deadlineMs?: number;
}

/** Where PutFiles takes its tar from: an archive, a tar stream, or a map of path → content. */
export type FilesSource = Uint8Array | Readable | AsyncIterable<Uint8Array> | FileMap;

const Ctor = grpc.makeGenericClientConstructor(gatewayDefinition, 'Gateway');
const CHUNK = 256 * 1024;

/** A tar stream: Node's, or any async iterable of chunks (tar-fs and streamx streams are). */
function isStream(s: FilesSource): s is AsyncIterable<Uint8Array> {
  return typeof (s as Partial<AsyncIterable<unknown>>)[Symbol.asyncIterator] === 'function';
}

type Callback<T> = (err: grpc.ServiceError | null, res: T) => void;

/**
 * A client of tether's gateway for one token (one tenant). Every failed request rejects with a
 * TetherError carrying the gRPC status code.
 */
export class TetherClient {
  /** The underlying grpc-js client, for what this class does not wrap. */
  readonly raw: InstanceType<typeof Ctor>;
  readonly address: string;
  private readonly meta: grpc.Metadata;
  private readonly shared?: SharedCalls;
  private checker?: ReturnType<typeof healthChecker>;

  constructor(address: string, token: string, options: ClientOptions | grpc.ClientOptions = {}) {
    const opts: ClientOptions =
      'credentials' in options || 'channelOptions' in options || 'multiplex' in options
        ? (options as ClientOptions)
        : { channelOptions: options as grpc.ClientOptions };
    this.address = address;
    this.raw = new Ctor(address, opts.credentials ?? grpc.credentials.createInsecure(), {
      'grpc.max_receive_message_length': 64 * 1024 * 1024,
      'grpc.max_send_message_length': 64 * 1024 * 1024,
      'grpc.primary_user_agent': `tether-client-ts/${VERSION}`,
      // Per-call counters for channelz, which nothing reads unless asked for (pass 1 to turn it on).
      'grpc.enable_channelz': 0,
      ...opts.channelOptions,
    });
    this.meta = new grpc.Metadata();
    this.meta.set('authorization', `Bearer ${token}`);
    if (opts.multiplex !== false) this.shared = new SharedCalls(() => this.raw.calls(this.meta));
  }

  private callOptions(o: RequestOptions): grpc.CallOptions {
    return o.deadlineMs ? { deadline: Date.now() + o.deadlineMs } : {};
  }

  /** Hangs up `call` when `signal` aborts; returns the listener's remover. */
  private bindSignal(call: grpc.Call, signal?: AbortSignal): () => void {
    if (!signal) return () => undefined;
    const onAbort = () => call.cancel();
    signal.addEventListener('abort', onAbort, { once: true });
    return () => signal.removeEventListener('abort', onAbort);
  }

  private unary<T>(method: string, req: unknown, o: RequestOptions = {}, meta = this.meta): Promise<T> {
    if (o.signal?.aborted) return Promise.reject(new TetherError(grpc.status.CANCELLED, abortReason(o.signal)));
    return new Promise<T>((resolve, reject) => {
      let unbind: () => void = () => undefined;
      const cb: Callback<T> = (err, res) => {
        unbind();
        if (err) reject(TetherError.from(err));
        else resolve(res);
      };
      const call = this.raw[method](req, meta, this.callOptions(o), cb) as grpc.Call;
      unbind = this.bindSignal(call, o.signal);
    });
  }

  /** Starts a run: an isolated sandbox with the requested features, ready when this resolves. */
  createRun(init: CreateRunInit = {}, o?: RequestOptions): Promise<Run> {
    return this.unary('createRun', create(CreateRunRequestSchema, init), o);
  }

  /** One of this tenant's runs; another tenant's run is NOT_FOUND. */
  getRun(runId: string, o?: RequestOptions): Promise<Run> {
    return this.unary('getRun', { $typeName: 'tether.v1.GetRunRequest', runId }, o);
  }

  async listRuns(o?: RequestOptions): Promise<Run[]> {
    return (await this.unary<ListRunsResponse>('listRuns', { $typeName: 'tether.v1.ListRunsRequest' }, o)).runs;
  }

  /** Stops the run's sandbox and removes its workspace. */
  async deleteRun(runId: string, o?: RequestOptions): Promise<void> {
    await this.unary('deleteRun', { $typeName: 'tether.v1.DeleteRunRequest', runId }, o);
  }

  /**
   * Keeps what of the run is data and lets go of its sandbox: a PAUSED run holds no memory or
   * CPU. Any later call, putFiles or getFiles resumes it on its own.
   */
  pauseRun(runId: string, o?: RequestOptions): Promise<Run> {
    return this.unary('pauseRun', { $typeName: 'tether.v1.PauseRunRequest', runId }, o);
  }

  /** Brings a paused run back before its next call needs it; a ready run is returned as it is. */
  resumeRun(runId: string, o?: RequestOptions): Promise<Run> {
    return this.unary('resumeRun', { $typeName: 'tether.v1.ResumeRunRequest', runId }, o);
  }

  /**
   * `count` new runs that start from the run's state now (its workspace copied, its kernels'
   * variables and staged edits restored in each); the run goes on.
   */
  async forkRun(runId: string, count = 1, o?: RequestOptions): Promise<Run[]> {
    return (await this.unary<ForkRunResponse>('forkRun', { $typeName: 'tether.v1.ForkRunRequest', runId, count }, o))
      .runs;
  }

  /** One page of this tenant's egress log (every run's, or `runId`'s), oldest first. */
  getEgressLog(query: EgressLogQuery = {}, o?: RequestOptions): Promise<GetEgressLogResponse> {
    return this.unary('getEgressLog', create(GetEgressLogRequestSchema, query), o);
  }

  /** Every record of this tenant's egress log (of one run, when given), page after page. */
  async *egressLog(runId = '', o?: RequestOptions): AsyncGenerator<EgressRecord> {
    let pageToken = '';
    do {
      const page = await this.getEgressLog({ runId, pageSize: 1000, pageToken }, o);
      yield* page.records;
      pageToken = page.nextPageToken;
    } while (pageToken);
  }

  /** The tools a surface sees, with their JSON Schemas, ready to hand to a model. */
  async listTools(runId: string, surface?: SurfaceInit, o?: RequestOptions): Promise<Tool[]> {
    const req = {
      $typeName: 'tether.v1.ListToolsRequest',
      runId,
      surface: surface ? create(SurfaceSchema, surface) : undefined,
    };
    return (await this.unary<ListToolsResponse>('listTools', req, o)).tools;
  }

  /**
   * Unpacks files into the workspace at `path` ("" = its root): a tar archive or stream, or a
   * map of path → content. All or nothing: an entry leaving the workspace refuses the whole archive.
   */
  putFiles(runId: string, source: FilesSource, path = '', o: RequestOptions = {}): Promise<PutFilesResponse> {
    if (o.signal?.aborted) return Promise.reject(new TetherError(grpc.status.CANCELLED, abortReason(o.signal)));
    return new Promise<PutFilesResponse>((resolve, reject) => {
      let unbind: () => void = () => undefined;
      let ended = false;
      const call = this.raw.putFiles(
        this.meta,
        this.callOptions(o),
        (err: grpc.ServiceError | null, res: PutFilesResponse) => {
          ended = true;
          unbind();
          if (err) reject(TetherError.from(err));
          else resolve(res);
        },
      ) as grpc.ClientWritableStream<unknown>;
      unbind = this.bindSignal(call, o.signal);
      call.write({
        $typeName: 'tether.v1.PutFilesRequest',
        msg: { case: 'header', value: { $typeName: 'tether.v1.PutFilesHeader', runId, path } },
      });
      (async () => {
        const tar: AsyncIterable<unknown> | Iterable<unknown> =
          source instanceof Uint8Array ? [source] : isStream(source) ? source : [await tarOf(source as FileMap)];
        for await (const chunk of tar) {
          const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
          for (let i = 0; i < buf.length; i += CHUNK) {
            // The gateway refused the archive early: stop reading it.
            if (ended) return;
            // Respect back-pressure: a large folder is not buffered whole in memory.
            if (
              !call.write({
                $typeName: 'tether.v1.PutFilesRequest',
                msg: { case: 'chunk', value: buf.subarray(i, i + CHUNK) },
              })
            ) {
              await new Promise<void>((r) => {
                call.once('drain', r);
                call.once('status', r);
              });
            }
          }
        }
        call.end();
      })().catch((e) => {
        call.cancel();
        reject(
          e instanceof TetherError
            ? e
            : new TetherError(grpc.status.CANCELLED, `reading the files failed: ${(e as Error).message}`, { cause: e }),
        );
      });
    });
  }

  /** Writes a map of path → content into the workspace (files get `mode`). */
  async putFileMap(runId: string, files: FileMap, mode = 0o644, o?: RequestOptions): Promise<PutFilesResponse> {
    return this.putFiles(runId, await tarOf(files, mode), '', o);
  }

  /** Copies a local folder's contents into the workspace at `path`. */
  putFolder(runId: string, dir: string, path = '', o?: RequestOptions): Promise<PutFilesResponse> {
    return this.putFiles(runId, tarOfFolder(dir), path, o);
  }

  /** A tar archive of the workspace, or of one path in it. */
  getFiles(runId: string, path = '', o: RequestOptions = {}): Promise<Buffer> {
    if (o.signal?.aborted) return Promise.reject(new TetherError(grpc.status.CANCELLED, abortReason(o.signal)));
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      const call = this.raw.getFiles(
        { $typeName: 'tether.v1.GetFilesRequest', runId, path },
        this.meta,
        this.callOptions(o),
      ) as grpc.ClientReadableStream<GetFilesResponse>;
      const unbind = this.bindSignal(call, o.signal);
      call.on('data', (m: GetFilesResponse) => chunks.push(Buffer.from(m.chunk)));
      call.on('end', () => {
        unbind();
        resolve(Buffer.concat(chunks));
      });
      call.on('error', (err) => {
        unbind();
        reject(TetherError.from(err));
      });
    });
  }

  /** The workspace's regular files (or those under `path`) by workspace-relative path. */
  async getFileMap(runId: string, path = '', o?: RequestOptions): Promise<Record<string, Buffer>> {
    return Object.fromEntries(await untar(await this.getFiles(runId, path, o)));
  }

  /** Downloads the workspace (or `path` in it) into a local folder. */
  async getFolder(runId: string, dir: string, path = '', o?: RequestOptions): Promise<void> {
    await extractTo(await this.getFiles(runId, path, o), dir);
  }

  /**
   * Runs one tool call to its result. Question cards, approval prompts and bridged calls are
   * answered by the handlers in `opts`. A tool that fails still resolves, with `isError` set;
   * the promise rejects (TetherError) only when the call itself was refused or broke.
   */
  async callTool(runId: string, tool: string, args: unknown = {}, opts: CallOptions = {}): Promise<CallOutcome> {
    if (opts.signal?.aborted) throw new TetherError(grpc.status.CANCELLED, abortReason(opts.signal));
    const start: MessageInitShape<typeof CallToolInputSchema>['msg'] = {
      case: 'start',
      value: {
        runId,
        callId: opts.callId ?? '',
        tool,
        argumentsJson: typeof args === 'string' ? args : JSON.stringify(args ?? {}),
        surface: opts.surface,
        acceptsQuestions: !!(opts.onQuestion || opts.onApproval),
        acceptsBridgeCalls: !!opts.onBridgeCall,
      },
    };
    const shared = this.shared;
    if (shared && !shared.unsupported) {
      try {
        return await driveCall(shared.channel(opts.deadlineMs, opts.traceparent), start, opts);
      } catch (err) {
        // A gateway without Calls: nothing of the call ran; it goes on its own stream.
        if (!(shared.unsupported && isTetherError(err, grpc.status.UNIMPLEMENTED))) throw err;
      }
    }
    let meta = this.meta;
    if (opts.traceparent) {
      meta = this.meta.clone();
      meta.set('traceparent', opts.traceparent);
    }
    const call = this.raw.callTool(meta, this.callOptions(opts)) as grpc.ClientDuplexStream<
      CallToolInput,
      CallToolOutput
    >;
    return driveCall(streamChannel(call), start, opts);
  }

  /**
   * Runs one tool call answered once (InvokeTool), for callers that need no stream: the same
   * gate, quotas and audit as callTool, but nothing can answer on it, so question cards and
   * approval prompts fail closed and bridged calls to tools of the client's are refused.
   */
  async invokeTool(
    runId: string,
    tool: string,
    args: unknown = {},
    opts: Pick<CallOptions, 'surface' | 'callId' | 'signal' | 'deadlineMs' | 'traceparent'> = {},
  ): Promise<CallOutcome> {
    const start = create(CallToolStartSchema, {
      runId,
      callId: opts.callId ?? '',
      tool,
      argumentsJson: typeof args === 'string' ? args : JSON.stringify(args ?? {}),
      surface: opts.surface,
    });
    let meta = this.meta;
    if (opts.traceparent) {
      meta = this.meta.clone();
      meta.set('traceparent', opts.traceparent);
    }
    const result = await this.unary<ToolResult>('invokeTool', start, opts, meta);
    return {
      result,
      text: resultText(result),
      structured: resultStructured(result),
      isError: result.isError,
      progress: [],
      questions: [],
      bridgeCalls: [],
    };
  }

  /**
   * Starts a process in the run (needs `features.commands`) and follows it: the events come in
   * order, `started` (its pid) first, its output as it comes, `end` last. The process starts at
   * once, whether or not the events are read. Leaving the iteration (or aborting `signal`) stops
   * following it, not the process: signalProcess does.
   */
  startProcess(req: StartProcessInit, o: RequestOptions = {}): AsyncIterable<ProcessEvent> {
    return this.serverStream<ProcessEvent>('startProcess', create(StartProcessRequestSchema, req), o);
  }

  /** Follows a running process's output from now until it ends; NOT_FOUND once it has ended. */
  connectProcess(runId: string, pid: number, o: RequestOptions = {}): AsyncIterable<ProcessEvent> {
    return this.serverStream<ProcessEvent>(
      'connectProcess',
      { $typeName: 'tether.v1.ConnectProcessRequest', runId, pid },
      o,
    );
  }

  /** Writes to a process's stdin (started with `stdin: true`) or to its PTY. */
  async sendProcessInput(runId: string, pid: number, data: Uint8Array | string, o?: RequestOptions): Promise<void> {
    const bytes = typeof data === 'string' ? Buffer.from(data) : data;
    await this.unary(
      'sendProcessInput',
      { $typeName: 'tether.v1.SendProcessInputRequest', runId, pid, data: bytes },
      o,
    );
  }

  /** Closes a process's stdin (EOF on a PTY). */
  async closeProcessInput(runId: string, pid: number, o?: RequestOptions): Promise<void> {
    await this.unary('closeProcessInput', { $typeName: 'tether.v1.ProcessRef', runId, pid }, o);
  }

  /** Sends a signal to a process's whole process group. */
  async signalProcess(runId: string, pid: number, signal: ProcessSignalInit, o?: RequestOptions): Promise<void> {
    const sig = typeof signal === 'string' ? ProcessSignal[signal] : signal;
    await this.unary('signalProcess', { $typeName: 'tether.v1.SignalProcessRequest', runId, pid, signal: sig }, o);
  }

  /** Changes the size of a process's PTY. */
  async resizeProcess(runId: string, pid: number, size: { cols: number; rows: number }, o?: RequestOptions) {
    await this.unary(
      'resizeProcess',
      { $typeName: 'tether.v1.ResizeProcessRequest', runId, pid, size: { $typeName: 'tether.v1.PtySize', ...size } },
      o,
    );
  }

  /** The run's running processes started through startProcess. */
  async listProcesses(runId: string, o?: RequestOptions): Promise<ProcessInfo[]> {
    return (
      await this.unary<ListProcessesResponse>(
        'listProcesses',
        { $typeName: 'tether.v1.ListProcessesRequest', runId },
        o,
      )
    ).processes;
  }

  /**
   * A server stream as an async iterable, its call made at once: a failure rejects the iteration
   * with a TetherError; leaving the iteration early hangs up.
   */
  private serverStream<T>(method: string, req: unknown, o: RequestOptions): AsyncIterable<T> {
    if (o.signal?.aborted) {
      const err = new TetherError(grpc.status.CANCELLED, abortReason(o.signal));
      return {
        [Symbol.asyncIterator]: () => ({ next: () => Promise.reject(err) }),
      };
    }
    const call = this.raw[method](req, this.meta, this.callOptions(o)) as grpc.ClientReadableStream<T>;
    const unbind = this.bindSignal(call, o.signal);
    // A failure before the iteration reads it is kept for the iteration to report.
    let failure: unknown;
    call.on('error', (err) => (failure ??= err));
    return (async function* () {
      try {
        for await (const msg of call) yield msg as T;
        if (failure !== undefined) throw failure;
      } catch (err) {
        throw TetherError.from(err);
      } finally {
        unbind();
        call.cancel();
      }
    })();
  }

  /**
   * Work for the run's `client`-backed vibe workers: START, SEND and KILL events until the run
   * ends. The watch is live once the stream's 'metadata' event fires.
   */
  watchWorkers(runId: string): grpc.ClientReadableStream<WorkerEvent> {
    return this.raw.watchWorkers({ $typeName: 'tether.v1.WatchWorkersRequest', runId }, this.meta);
  }

  /** Reports a client worker's progress (RUNNING) or the final status and result of its round. */
  async reportWorker(
    req: Omit<MessageInitShape<typeof ReportWorkerRequestSchema>, '$typeName'> | Omit<ReportWorkerRequest, '$typeName'>,
    o?: RequestOptions,
  ): Promise<void> {
    await this.unary(
      'reportWorker',
      create(ReportWorkerRequestSchema, req as MessageInitShape<typeof ReportWorkerRequestSchema>),
      o,
    );
  }

  /** The gateway's health status (`grpc.health.v1`) over this client's own connection; needs no token. */
  health(service = 'tether.v1.Gateway', deadlineMs = 2000): Promise<string> {
    this.checker ??= healthChecker(this.raw.getChannel());
    return this.checker(service, deadlineMs);
  }

  close(): void {
    this.shared?.close();
    this.raw.close();
  }
}
