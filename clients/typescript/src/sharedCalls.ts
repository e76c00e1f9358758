import { Metadata, status, type ClientDuplexStream } from '@grpc/grpc-js';
import {
  CallsInputSchema,
  type CallsInput,
  type CallsOutput,
  type CallToolInput,
  type CallToolOutput,
} from '@tether/contract';
import { create } from '@bufbuild/protobuf';
import type { CallChannel } from './call';
import { TetherError } from './errors';

/** How long the shared stream stays open with no call on it. */
const IDLE_MS = 1000;

interface Route {
  /** The stream the call went out on: a stream that fails ends only its own calls. */
  stream: ClientDuplexStream<CallsInput, CallsOutput>;
  output(out: CallToolOutput): void;
  end(err?: TetherError): void;
}

/**
 * One Calls stream shared by every tool call of a client: each call is an id on it, so a
 * call costs two messages instead of a stream's setup. The stream opens on the first call,
 * and is half-closed after a second with no call on it (an open stream would keep the process
 * alive). When it fails, every call on it fails with its status, and the next call opens a
 * new one; an UNIMPLEMENTED stream (a gateway without Calls) marks it `unsupported`.
 */
export class SharedCalls {
  private stream?: ClientDuplexStream<CallsInput, CallsOutput>;
  private readonly routes = new Map<string, Route>();
  private seq = 0;
  private idle?: NodeJS.Timeout;
  /** The gateway does not serve Calls: use one CallTool stream per call. */
  unsupported = false;

  constructor(private readonly openStream: () => ClientDuplexStream<CallsInput, CallsOutput>) {}

  /** The channel of one new call, with a deadline (ms from now) kept by this side. */
  channel(deadlineMs?: number, traceparent = ''): CallChannel {
    const stream = this.current();
    const callId = `c${++this.seq}`;
    let outputFn: (out: CallToolOutput) => void = () => undefined;
    let endFn: (err?: TetherError) => void = () => undefined;
    let ended = false;
    let timer: NodeJS.Timeout | undefined;
    const send = (input: CallToolInput) => {
      if (!ended && !stream.writableEnded && !stream.destroyed)
        stream.write(
          create(CallsInputSchema, { callId, input, traceparent: input.msg.case === 'start' ? traceparent : '' }),
        );
    };
    const end = (err?: TetherError) => {
      if (ended) return;
      ended = true;
      clearTimeout(timer);
      this.forget(callId);
      endFn(err);
    };
    this.routes.set(callId, { stream, output: (out) => outputFn(out), end });
    if (deadlineMs !== undefined) {
      timer = setTimeout(() => {
        send(cancel('the deadline passed'));
        end(new TetherError(status.DEADLINE_EXCEEDED, 'Deadline exceeded'));
      }, deadlineMs);
    }
    return {
      send,
      onOutput: (fn) => {
        outputFn = fn;
      },
      onEnd: (fn) => {
        endFn = fn;
      },
      close: () => {
        // Given up before its result (a handler failed, no result after a cancel): the gateway
        // is told to stop it, and its late messages find no route.
        if (!ended) send(cancel('the client hung up'));
        ended = true;
        clearTimeout(timer);
        this.forget(callId);
      },
      get open() {
        return !ended && !stream.writableEnded && !stream.destroyed;
      },
    };
  }

  /** Half-closes the stream: calls still on it run to their results. */
  close(): void {
    clearTimeout(this.idle);
    this.stream?.end();
    this.stream = undefined;
  }

  private current(): ClientDuplexStream<CallsInput, CallsOutput> {
    clearTimeout(this.idle);
    if (this.stream) return this.stream;
    const stream = this.openStream();
    this.stream = stream;
    stream.on('data', (msg: CallsOutput) => {
      const route = this.routes.get(msg.callId);
      if (!route) return;
      if (msg.msg.case === 'output') {
        route.output(msg.msg.value);
        if (msg.msg.value.msg.case === 'result') route.end();
      } else if (msg.msg.case === 'error') {
        const e = msg.msg.value;
        const md = new Metadata();
        if (e.retryAfterMs > 0) md.set('retry-after-ms', String(e.retryAfterMs));
        route.end(new TetherError(e.code, e.message, { metadata: md }));
      }
    });
    const fail = (err: TetherError) => {
      if (this.stream === stream) this.stream = undefined;
      if (err.code === status.UNIMPLEMENTED) this.unsupported = true;
      for (const r of [...this.routes.values()]) if (r.stream === stream) r.end(err);
    };
    stream.on('error', (err) => fail(TetherError.from(err)));
    stream.on('end', () => fail(new TetherError(status.UNAVAILABLE, 'the gateway ended the Calls stream')));
    return stream;
  }

  private forget(callId: string): void {
    this.routes.delete(callId);
    if (this.routes.size > 0 || !this.stream) return;
    clearTimeout(this.idle);
    this.idle = setTimeout(() => this.close(), IDLE_MS);
    this.idle.unref();
  }
}

const cancel = (reason: string): CallToolInput =>
  ({
    $typeName: 'tether.v1.CallToolInput',
    msg: { case: 'cancel', value: { $typeName: 'tether.v1.Cancel', reason } },
  }) as CallToolInput;
