import type { DescMessage, DescMethod, MessageShape } from '@bufbuild/protobuf';
import { Gateway } from '@tether/contract';
import type { GatewayError } from '../errors';

/**
 * What every RPC's logic sees of its transport, whichever carries it (grpc-js on the gRPC port,
 * Connect on the HTTP listener): the caller's headers, the deadline, and a signal for the client
 * going away. The edges make these; `methods.ts` holds the logic, one function per RPC.
 */
export interface RpcContext {
  /** Aborted when the client goes away (or, on Connect, once the call is over). */
  readonly signal: AbortSignal;
  /** When the call must be over (ms since the epoch), if the client set a deadline. */
  readonly deadline?: number;
  /** A request header (gRPC metadata), the first value. */
  header(name: string): string | undefined;
}

/** Where a server stream's messages go. */
export interface StreamSink<T> {
  /** Aborted when the client went away: the stream's logic stops and resolves. */
  readonly signal: AbortSignal;
  /** Sends one message; resolves once the transport takes more (or the client is gone). */
  send(msg: T): Promise<void>;
  /**
   * The stream is live from now on: gRPC sends its headers at once. Connect sends headers with
   * the first message, so there this does nothing.
   */
  ready(): void;
}

/** The events of a stream's input side, as grpc-js's server streams emit them. */
interface InputEvents<In> {
  on(event: 'data', fn: (msg: In) => void): this;
  on(event: 'end' | 'cancelled' | 'drain', fn: () => void): this;
  on(event: 'error', fn: (err: Error) => void): this;
  once(event: 'data', fn: (msg: In) => void): this;
  once(event: 'end' | 'cancelled' | 'drain', fn: () => void): this;
  once(event: 'error', fn: (err: Error) => void): this;
  removeListener(event: 'data', fn: (msg: In) => void): this;
  removeListener(event: 'end' | 'cancelled' | 'drain', fn: () => void): this;
}

/**
 * A client stream's side the logic reads: the shape of grpc-js's ServerReadableStream that the
 * code uses, which the Connect edge gives its streams as well.
 */
export interface InputStream<In> extends InputEvents<In> {
  readonly metadata: { get(key: string): (string | Buffer)[] };
  /** Stops 'data' until `resume` (backpressure). */
  pause(): unknown;
  resume(): unknown;
}

/**
 * A bidirectional stream as its logic drives it: grpc-js's ServerDuplexStream, or the Connect
 * edge's stream of the same shape. 'cancelled' means the client is gone.
 */
export interface DuplexStream<In, Out> extends InputStream<In> {
  readonly cancelled: boolean;
  readonly destroyed: boolean;
  readonly writableEnded: boolean;
  /** ms since the epoch, a Date, or Infinity for none (grpc-js's Deadline). */
  getDeadline(): Date | number;
  write(msg: Out): boolean;
  end(): void;
}

export type Unary<Req, Res> = (req: Req, tenant: string, ctx: RpcContext) => Promise<Res>;
/** Writes the stream's messages to `sink`; the stream ends when the promise resolves, with its status when it rejects. */
export type ServerStream<Req, Res> = (
  req: Req,
  tenant: string,
  sink: StreamSink<Res>,
  ctx: RpcContext,
) => Promise<void>;
/** Reads the stream and resolves with the one answer. */
export type ClientStream<Req, Res> = (input: InputStream<Req>, tenant: string) => Promise<Res>;
/**
 * A bidirectional stream. `refuse` runs right after authentication, before any message is
 * read, and may turn the stream away with a status made in advance; `serve` drives the stream,
 * and `fail` ends it with a status from any later event.
 */
export interface Bidi<In, Out> {
  refuse?: (tenant: string) => GatewayError | undefined;
  serve: (stream: DuplexStream<In, Out>, tenant: string, fail: (err: unknown) => void) => void | Promise<void>;
}

type Shape<D> = D extends DescMessage ? MessageShape<D> : never;
type Methods = (typeof Gateway)['method'];

/** The logic of one RPC, by its kind in the proto. */
export type MethodLogic<M> = M extends DescMethod
  ? M['methodKind'] extends 'unary'
    ? Unary<Shape<M['input']>, Shape<M['output']>>
    : M['methodKind'] extends 'server_streaming'
      ? ServerStream<Shape<M['input']>, Shape<M['output']>>
      : M['methodKind'] extends 'client_streaming'
        ? ClientStream<Shape<M['input']>, Shape<M['output']>>
        : Bidi<Shape<M['input']>, Shape<M['output']>>
  : never;

/** Every RPC of tether.v1.Gateway, by its local name: the compiler checks that none is missing. */
export type GatewayMethods = { [K in keyof Methods]: MethodLogic<Methods[K]> };

/** Resolves when `signal` aborts (at once when it has). */
export function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener('abort', () => resolve(), { once: true });
  });
}

/** The context of a call made from inside the gateway (another surface's), with no headers of its own. */
export function localContext(signal: AbortSignal = new AbortController().signal): RpcContext {
  return { signal, header: () => undefined };
}

/** What an edge wraps each kind of RPC's logic into, for its transport. */
export interface MethodEdge<H> {
  unary(logic: Unary<unknown, unknown>): H;
  serverStream(logic: ServerStream<unknown, unknown>): H;
  clientStream(logic: ClientStream<unknown, unknown>): H;
  bidi(logic: Bidi<unknown, unknown>): H;
}

/** Every RPC of tether.v1.Gateway, its logic wrapped by `edge` by the RPC's kind: the one mapping both transports use. */
export function wrapMethods<H>(methods: GatewayMethods, edge: MethodEdge<H>): Record<string, H> {
  const impl: Record<string, H> = {};
  for (const m of Gateway.methods) {
    const logic = methods[m.localName as keyof GatewayMethods];
    switch (m.methodKind) {
      case 'unary':
        impl[m.localName] = edge.unary(logic as Unary<unknown, unknown>);
        break;
      case 'server_streaming':
        impl[m.localName] = edge.serverStream(logic as ServerStream<unknown, unknown>);
        break;
      case 'client_streaming':
        impl[m.localName] = edge.clientStream(logic as ClientStream<unknown, unknown>);
        break;
      case 'bidi_streaming':
        impl[m.localName] = edge.bidi(logic as Bidi<unknown, unknown>);
        break;
    }
  }
  return impl;
}
