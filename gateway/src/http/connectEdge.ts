import { status } from '@grpc/grpc-js';
import { Code, ConnectError, createContextKey, type HandlerContext } from '@connectrpc/connect';
import type { TokenAuthenticator } from '../auth';
import { GatewayError } from '../errors';
import { toStatus } from '../grpc/edge';
import type { Bidi, ClientStream, RpcContext, ServerStream, StreamSink, Unary } from '../grpc/streams';
import { Telemetry } from '../observability/Telemetry';
import { ResourceExhausted, refusalDetails } from '../tenancy/statusDetails';
import { ConnectStream, Outbox } from './connectStream';

/** The client's address (`host:port`), for the audit record of a refused token. */
export const PEER = createContextKey<string>('unknown', { description: "the client's address" });

/**
 * The ConnectError a failure is answered with: the status the gRPC edge would send (same
 * numeric code, same message; unknown errors INTERNAL and logged), its plain trailers as
 * headers (`retry-after-ms`), and a refusal's RetryInfo and QuotaFailure as error details.
 */
export function toConnectError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  const st = toStatus(err);
  const headers = new Headers();
  for (const [key, value] of Object.entries(st.metadata?.getMap() ?? {}))
    if (!key.endsWith('-bin') && typeof value === 'string') headers.set(key, value);
  const e = new ConnectError(st.message, st.code as number as Code, headers);
  if (st instanceof ResourceExhausted) e.details.push(...refusalDetails(st.detail));
  return e;
}

/** What a call's logic sees of a Connect call. */
function rpcContext(ctx: HandlerContext): RpcContext {
  const left = ctx.timeoutMs();
  return {
    signal: ctx.signal,
    deadline: left === undefined ? undefined : Date.now() + left,
    header: (name) => ctx.requestHeader.get(name) ?? undefined,
  };
}

/** Past its deadline, a call that ended because its signal aborted ends DEADLINE_EXCEEDED, as on gRPC. */
function failure(err: unknown, ctx: HandlerContext): ConnectError {
  const reason: unknown = ctx.signal.reason;
  if (reason instanceof ConnectError && reason.code === Code.DeadlineExceeded) return reason;
  return toConnectError(err);
}

/** The shapes of Connect's method implementations (`ServiceImpl`), per kind. */
type UnaryImpl<I, O> = (req: I, ctx: HandlerContext) => Promise<O>;
type ClientStreamingImpl<I, O> = (requests: AsyncIterable<I>, ctx: HandlerContext) => Promise<O>;
type ServerStreamingImpl<I, O> = (req: I, ctx: HandlerContext) => AsyncIterable<O>;
type BiDiStreamingImpl<I, O> = (requests: AsyncIterable<I>, ctx: HandlerContext) => AsyncIterable<O>;

/**
 * The Connect counterpart of the gRPC edge (`grpc/edge.ts`): the caller is authenticated from
 * its `authorization: Bearer` header before anything else runs, the RPC's logic runs with only
 * the tenant, and whatever it throws leaves as a ConnectError with the gRPC status's code. Each
 * unary, server- and client-stream RPC is counted by method and code, as on the gRPC edge.
 */
export class ConnectEdge {
  constructor(
    private readonly auth: TokenAuthenticator,
    readonly telemetry: Telemetry = Telemetry.off,
  ) {}

  /** The caller's tenant; a refusal is reported (method and peer, never the token) and thrown. */
  private tenantOf(ctx: HandlerContext): string {
    try {
      return this.auth.authenticateHeader(ctx.requestHeader.get('authorization'));
    } catch (err) {
      if (err instanceof GatewayError && err.code === status.UNAUTHENTICATED) {
        this.telemetry.authFailed(
          ctx.method.name,
          ctx.values.get(PEER),
          err.message.startsWith('missing') ? 'missing' : 'invalid',
        );
      }
      throw err;
    }
  }

  private counted(ctx: HandlerContext, err?: unknown): ConnectError | undefined {
    if (err === undefined) {
      this.telemetry.rpc(ctx.method.name, status.OK);
      return undefined;
    }
    const e = failure(err, ctx);
    this.telemetry.rpc(ctx.method.name, e.code as number);
    return e;
  }

  unary<I, O>(fn: Unary<I, O>): UnaryImpl<I, O> {
    return async (req, ctx) => {
      let res: O;
      try {
        res = await fn(req, this.tenantOf(ctx), rpcContext(ctx));
      } catch (err) {
        throw this.counted(ctx, err);
      }
      this.counted(ctx);
      return res;
    };
  }

  clientStream<I, O>(fn: ClientStream<I, O>): ClientStreamingImpl<I, O> {
    return async (requests, ctx) => {
      let res: O;
      let stream: ConnectStream<I, never> | undefined;
      try {
        const tenant = this.tenantOf(ctx);
        stream = new ConnectStream<I, never>(requests, ctx);
        const answer = fn(stream, tenant);
        stream.start();
        res = await answer;
      } catch (err) {
        throw this.counted(ctx, err);
      } finally {
        // Answered: what else the client sends is not read.
        if (stream) stream.destroyed = true;
      }
      this.counted(ctx);
      return res;
    };
  }

  /** A server stream: the logic writes to its sink; the stream ends when it resolves, with its error when it rejects. */
  serverStream<I, O>(fn: ServerStream<I, O>): ServerStreamingImpl<I, O> {
    const edge = this;
    return async function* (req, ctx) {
      let tenant: string;
      try {
        tenant = edge.tenantOf(ctx);
      } catch (err) {
        throw edge.counted(ctx, err);
      }
      const outbox = new Outbox<O>();
      const sink: StreamSink<O> = {
        signal: ctx.signal,
        send: (msg) => (outbox.push(msg) ? Promise.resolve() : outbox.whenDrained()),
        ready: () => undefined,
      };
      // The client gone: nothing more goes out, and the logic sees its signal.
      ctx.signal.addEventListener('abort', () => outbox.end(), { once: true });
      fn(req, tenant, sink, rpcContext(ctx)).then(
        () => {
          edge.counted(ctx);
          outbox.end();
        },
        (err: unknown) => outbox.fail(edge.counted(ctx, err)),
      );
      yield* outbox;
    };
  }

  /**
   * A bidirectional stream (HTTP/2 only, for Connect's clients). `refuse` turns a stream away
   * before any message is read; otherwise the logic drives a ConnectStream of the grpc-js shape
   * and may end it with `fail`. Not counted here: its calls are, as on the gRPC edge.
   */
  bidi<I, O>({ refuse, serve }: Bidi<I, O>): BiDiStreamingImpl<I, O> {
    const edge = this;
    return async function* (requests, ctx) {
      let tenant: string;
      try {
        tenant = edge.tenantOf(ctx);
      } catch (err) {
        throw toConnectError(err);
      }
      const refused = refuse?.(tenant);
      if (refused) throw toConnectError(refused);
      const stream = new ConnectStream<I, O>(requests, ctx);
      const fail = (err: unknown) => stream.fail(failure(err, ctx));
      void (async () => serve(stream, tenant, fail))().catch(fail);
      stream.start();
      yield* stream.outbox;
    };
  }
}
