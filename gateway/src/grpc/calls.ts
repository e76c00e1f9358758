import { status } from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import {
  CallErrorSchema,
  CallsOutputSchema,
  type CallsInput,
  type CallsOutput,
  type CallToolOutput,
} from '@tether/contract';
import { GatewayError, invalid } from '../errors';
import { ResourceExhausted } from '../tenancy/statusDetails';
import { CallDriver, type CallDeps } from './callDriver';
import type { CallSink } from './callSink';
import type { DuplexStream } from './streams';

/** The open Calls streams, told to finish their calls and end when the gateway shuts down. */
export class CallsDrain {
  private readonly streams = new Set<() => void>();
  private draining = false;

  /** Runs `drain` at shutdown (at once, when it has begun); returns the remover. */
  enter(drain: () => void): () => void {
    if (this.draining) {
      queueMicrotask(drain);
      return () => undefined;
    }
    this.streams.add(drain);
    return () => this.streams.delete(drain);
  }

  drain(): void {
    this.draining = true;
    for (const d of [...this.streams]) d();
  }
}

/**
 * One Calls stream: many calls, each its own CallDriver under its call_id, as if each had a
 * CallTool stream of its own. Each start spends one of the tenant's CallTool tokens; a call's
 * failure is its CallError, and the stream's status is kept for the stream itself. The stream
 * ends once the client half-closed and every call has ended.
 */
export function serveCalls(
  call: DuplexStream<CallsInput, CallsOutput>,
  tenant: string,
  fail: (err: unknown) => void,
  deps: CallDeps,
  shutdown: CallsDrain,
): void {
  const live = new Map<string, { driver: CallDriver; sink: CallSink & { stop(reason: string): void } }>();
  let inputDone = false;
  // Shutting down: calls in flight finish, new ones are refused, and the stream ends after.
  let draining = false;
  const gone = () => call.cancelled || call.destroyed;
  const endIfDone = () => {
    if ((inputDone || draining) && live.size === 0 && !gone() && !call.writableEnded) {
      leave();
      call.end();
    }
  };
  const leave = shutdown.enter(() => {
    draining = true;
    endIfDone();
  });
  const send = (callId: string, msg: CallsOutput['msg']) => {
    if (!gone()) call.write(create(CallsOutputSchema, { callId, msg }));
  };
  const streamTraceparent = call.metadata.get('traceparent')[0];

  /** The call's sink on this stream; `stop` is what the call does when its client is gone. */
  const sinkOf = (callId: string) => {
    let stop: ((reason: string) => void) | undefined;
    const sink: CallSink & { stop(reason: string): void } = {
      get gone() {
        return gone();
      },
      write: (out: CallToolOutput) => send(callId, { case: 'output', value: out }),
      end: () => {
        over(callId);
        // Nothing more of this call reaches its client: work it left running stops.
        stop?.('the call ended');
      },
      fail: (err: GatewayError) => {
        send(callId, { case: 'error', value: callError(err) });
        over(callId);
      },
      onGone: (fn) => {
        stop = fn;
      },
      stop: (reason) => stop?.(reason),
    };
    return sink;
  };
  const over = (callId: string) => {
    live.delete(callId);
    endIfDone();
  };
  const stopAll = (reason: string) => {
    for (const { driver, sink } of live.values()) {
      driver.gone();
      sink.stop(reason);
    }
  };
  const failStream = (err: unknown) => {
    leave();
    stopAll('the stream failed');
    fail(err);
  };

  call.on('data', (msg: CallsInput) => {
    const { callId, input } = msg;
    if (!callId || !input) return failStream(invalid('Calls: every message needs a call_id and an input'));
    if (callId.length > MAX_CALL_ID)
      return failStream(invalid(`Calls: a call_id is at most ${MAX_CALL_ID} characters`));
    if (input.msg.case !== 'start') return live.get(callId)?.driver.receive(input);
    if (live.has(callId)) return failStream(invalid(`Calls: call ${callId} is already in flight on this stream`));
    if (draining) return send(callId, { case: 'error', value: callError(SHUTTING_DOWN) });
    const refused = deps.tenancy.refusal(tenant, 'callTool');
    if (refused) return send(callId, { case: 'error', value: callError(refused) });
    const sink = sinkOf(callId);
    const traceparent = msg.traceparent || (typeof streamTraceparent === 'string' ? streamTraceparent : undefined);
    const driver = new CallDriver(sink, tenant, deps, traceparent);
    live.set(callId, { driver, sink });
    input.msg.value.callId = callId;
    driver.receive(input);
  });
  call.on('end', () => {
    inputDone = true;
    for (const { driver } of live.values()) driver.inputEnded();
    endIfDone();
  });
  call.on('error', () => stopAll('the stream failed'));
  call.on('cancelled', () => {
    leave();
    stopAll('the client went away');
  });
}

/** Every message carries its call's id back: a long one would be paid for again and again. */
const MAX_CALL_ID = 128;
const SHUTTING_DOWN = new GatewayError(status.UNAVAILABLE, 'the gateway is shutting down');

function callError(err: GatewayError) {
  return create(CallErrorSchema, {
    code: err.code,
    message: err.message,
    retryAfterMs: err instanceof ResourceExhausted ? (err.detail.retryAfterMs ?? 0) : 0,
  });
}
