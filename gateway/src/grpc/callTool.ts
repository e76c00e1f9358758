import type { CallToolInput, CallToolOutput } from '@tether/contract';
import { CallDriver, type CallDeps } from './callDriver';
import type { CallSink } from './callSink';
import type { DuplexStream } from './streams';

/** A CallTool stream as the sink of its one call. */
export function streamSink(call: DuplexStream<CallToolInput, CallToolOutput>, fail: (err: unknown) => void): CallSink {
  const deadline = call.getDeadline();
  return {
    deadline: deadline instanceof Date ? deadline.getTime() : typeof deadline === 'number' ? deadline : undefined,
    get gone() {
      return call.cancelled || call.destroyed;
    },
    write: (out) => call.write(out),
    end: () => {
      if (!call.writableEnded && !call.destroyed) call.end();
    },
    fail,
    onGone: (fn) => call.on('cancelled', () => fn('the client went away')),
  };
}

/**
 * One CallTool stream, admitted past the tenant's rate limit (the edge checks it when the
 * stream opens, before this runs): the stream carries one call; its result ends the stream, a
 * failure its status.
 */
export function serveCallTool(
  call: DuplexStream<CallToolInput, CallToolOutput>,
  tenant: string,
  fail: (err: unknown) => void,
  deps: CallDeps,
): void {
  const traceparent = call.metadata.get('traceparent')[0];
  const driver = new CallDriver(
    streamSink(call, fail),
    tenant,
    deps,
    typeof traceparent === 'string' ? traceparent : undefined,
  );
  call.on('data', (msg: CallToolInput) => driver.receive(msg));
  call.on('end', () => driver.inputEnded());
  call.on('error', () => driver.streamFailed());
  call.on('cancelled', () => driver.gone());
}
