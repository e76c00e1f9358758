import {
  Metadata,
  status,
  type handleBidiStreamingCall,
  type handleClientStreamingCall,
  type handleServerStreamingCall,
  type handleUnaryCall,
  type ServerDuplexStream,
  type ServerUnaryCall,
  type ServerWritableStream,
} from '@grpc/grpc-js';
import type { TokenAuthenticator } from '../auth';
import { ToolAbsentError } from '../calls/ToolInvoker';
import { GatewayError } from '../errors';
import { logger } from '../log';
import { Telemetry } from '../observability/Telemetry';
import { RunnerGoneError } from '../runs/RunnerClient';
import { SandboxBackendUnavailableError } from '../sandbox/provider';
import type { Bidi, ClientStream, RpcContext, ServerStream, StreamSink, Unary } from './streams';

/** The one status a failure is answered with; unknown errors are INTERNAL and logged. */
export function toStatus(err: unknown): GatewayError {
  if (err instanceof GatewayError) return err;
  if (err instanceof RunnerGoneError)
    return new GatewayError(status.UNAVAILABLE, `the run's runner is gone: ${err.message}`);
  if (err instanceof ToolAbsentError) return new GatewayError(status.NOT_FOUND, err.message);
  if (err instanceof SandboxBackendUnavailableError) return new GatewayError(status.UNAVAILABLE, err.message);
  logger.error({ err }, 'internal error');
  return new GatewayError(status.INTERNAL, `internal error: ${(err as Error | undefined)?.message ?? String(err)}`);
}

/** The method's short name (CreateRun), a bounded label. */
function methodOf(call: { getPath(): string }): string {
  const p = call.getPath();
  return p.slice(p.lastIndexOf('/') + 1) || 'unknown';
}

/** Ends a streaming call with the status of `err`, unless the call is already over. */
function failStream<Req, Res>(call: ServerWritableStream<Req, Res> | ServerDuplexStream<Req, Res>, err: unknown): void {
  if (call.destroyed) return;
  call.emit('error', toStatus(err));
}

/**
 * Ends a refused stream once the client's first message has arrived (or it half-closed, or a
 * second went by), not at once: grpc's asyncio client loses the status that lands while its
 * first write is still under way (the write fails, and the call then reports INTERNAL "Internal
 * error from Core" instead of, say, UNAUTHENTICATED). Nothing of the message is read.
 */
function refuseAfterFirstMessage<Req, Res>(call: ServerDuplexStream<Req, Res>, refuse: () => void): void {
  let ended = false;
  const end = () => {
    if (ended) return;
    ended = true;
    clearTimeout(timer);
    call.removeListener('data', end);
    call.removeListener('end', end);
    if (!call.destroyed) refuse();
  };
  const timer = setTimeout(end, 1000);
  call.once('data', end);
  call.once('end', end);
  call.once('cancelled', () => {
    ended = true;
    clearTimeout(timer);
  });
}

/**
 * Every handler enters here: the caller is authenticated before anything else runs, and
 * whatever the handler throws leaves as a gRPC status. Handlers see only the tenant.
 */
export class Edge {
  constructor(
    private readonly auth: TokenAuthenticator,
    readonly telemetry: Telemetry = Telemetry.off,
  ) {}

  /** The caller's tenant; a refusal is reported (method and peer, never the token) and thrown. */
  private tenantOf(call: { metadata: Metadata; getPath(): string; getPeer(): string }): string {
    try {
      return this.auth.authenticate(call.metadata);
    } catch (err) {
      if (err instanceof GatewayError && err.code === status.UNAUTHENTICATED) {
        this.telemetry.authFailed(
          methodOf(call),
          call.getPeer(),
          err.message.startsWith('missing') ? 'missing' : 'invalid',
        );
      }
      throw err;
    }
  }

  /** Answers a unary or client-stream call, counting its status by method. */
  private answer<Res>(
    call: { getPath(): string },
    cb: (err: GatewayError | null, res?: Res) => void,
    p: Promise<Res>,
  ): void {
    p.then(
      (res) => {
        this.telemetry.rpc(methodOf(call), status.OK);
        cb(null, res);
      },
      (err: unknown) => {
        const st = toStatus(err);
        this.telemetry.rpc(methodOf(call), st.code);
        cb(st);
      },
    );
  }

  unary<Req, Res>(fn: Unary<Req, Res>): handleUnaryCall<Req, Res> {
    return (call, cb) =>
      this.answer(call, cb, (async () => fn(call.request, this.tenantOf(call), callContext(call)))());
  }

  /** A client stream answered once; the logic resolves with the response or rejects. */
  clientStream<Req, Res>(fn: ClientStream<Req, Res>): handleClientStreamingCall<Req, Res> {
    return (call, cb) => this.answer(call, cb, (async () => fn(call, this.tenantOf(call)))());
  }

  /** A server stream: the logic writes to its sink; the stream ends when it resolves, with a status when it rejects. */
  serverStream<Req, Res>(fn: ServerStream<Req, Res>): handleServerStreamingCall<Req, Res> {
    return (call) => {
      void (async () => {
        const tenant = this.tenantOf(call);
        await fn(call.request, tenant, streamSink(call), callContext(call));
        if (!call.cancelled && !call.destroyed && !call.writableEnded) call.end();
      })().then(
        () => this.telemetry.rpc(methodOf(call), status.OK),
        (err: unknown) => {
          const st = toStatus(err);
          this.telemetry.rpc(methodOf(call), st.code);
          failStream(call, st);
        },
      );
    };
  }

  /**
   * A bidirectional stream. Its logic is driven by incoming messages, so besides a rejection it
   * gets `fail` to end the call with a status from any later event.
   *
   * A stream that `refuse` turns away is refused as the very first thing after authentication:
   * before the first message is read or decoded, before any per-call object, log line, audit
   * record or metric (`refuse` counts what it refuses itself). A flood of refused streams then
   * costs the gateway little more than grpc-js's own work per stream.
   */
  bidi<Req, Res>({ refuse, serve }: Bidi<Req, Res>): handleBidiStreamingCall<Req, Res> {
    return (call) => {
      let tenant: string;
      try {
        tenant = this.tenantOf(call);
      } catch (err) {
        return refuseAfterFirstMessage(call, () => failStream(call, err));
      }
      const refused = refuse?.(tenant);
      if (refused) return refuseAfterFirstMessage(call, () => call.emit('error', refused));
      const fail = (err: unknown) => failStream(call, err);
      void (async () => serve(call, tenant, fail))().catch(fail);
    };
  }
}

/** A call's context for its logic; the signal is made only when the logic asks for it. */
function callContext(call: ServerUnaryCall<unknown, unknown> | ServerWritableStream<unknown, unknown>): RpcContext {
  let abort: AbortController | undefined;
  return {
    get signal() {
      if (!abort) {
        const a = (abort = new AbortController());
        if (call.cancelled) a.abort('the client went away');
        else call.once('cancelled', () => a.abort('the client went away'));
      }
      return abort.signal;
    },
    get deadline() {
      const d = call.getDeadline();
      const ms = d instanceof Date ? d.getTime() : d;
      return Number.isFinite(ms) ? ms : undefined;
    },
    header(name) {
      const v = call.metadata.get(name)[0];
      return typeof v === 'string' ? v : undefined;
    },
  };
}

/** A server stream as its logic's sink: writes wait for 'drain', and for nothing once the client is gone. */
function streamSink<Res>(call: ServerWritableStream<unknown, Res>): StreamSink<Res> {
  const abort = new AbortController();
  call.once('cancelled', () => abort.abort('the client went away'));
  return {
    signal: abort.signal,
    send(msg) {
      if (abort.signal.aborted || call.writableEnded) return Promise.resolve();
      if (call.write(msg)) return Promise.resolve();
      return new Promise<void>((resolve) => {
        const done = () => {
          call.removeListener('drain', done);
          abort.signal.removeEventListener('abort', done);
          resolve();
        };
        call.once('drain', done);
        abort.signal.addEventListener('abort', done, { once: true });
      });
    },
    ready: () => call.sendMetadata(new Metadata()),
  };
}
