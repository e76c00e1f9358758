import { create } from '@bufbuild/protobuf';
import { CallToolInputSchema, ToolResultSchema, type CallToolStart, type ToolResult } from '@tether/contract';
import { status } from '@grpc/grpc-js';
import { GatewayError } from '../errors';
import { CallDriver, type CallDeps } from './callDriver';
import type { CallSink } from './callSink';
import type { RpcContext } from './streams';

/** Why nothing can answer a card of an InvokeTool: the call has no input side. */
export const NO_INPUT = 'InvokeTool answers once and nothing can answer on it (use CallTool or Calls for questions)';

/**
 * One tool call answered once (InvokeTool): the same CallDriver and ToolInvoker as a CallTool
 * stream whose client sent its start and half-closed at once. Its sink keeps the result and
 * drops what a stream would show (progress, cards: those fail closed as the input has ended);
 * bridged calls to tools the client would own are refused. The tenant's CallTool rate applies,
 * checked before anything else, as for a CallTool stream when it opens.
 */
export function invokeTool(deps: CallDeps, start: CallToolStart, tenant: string, ctx: RpcContext): Promise<ToolResult> {
  const refused = deps.tenancy.refusal(tenant, 'callTool');
  if (refused) return Promise.reject(refused);
  return new Promise<ToolResult>((resolve, reject) => {
    let result: ToolResult | undefined;
    const signal = ctx.signal;
    const sink: CallSink = {
      deadline: ctx.deadline,
      get gone() {
        return signal.aborted;
      },
      write: (out) => {
        if (out.msg.case === 'result') result = out.msg.value;
      },
      end: () => resolve(result ?? create(ToolResultSchema, {})),
      fail: (err: GatewayError) => reject(err),
      onGone: (fn) => {
        if (signal.aborted) queueMicrotask(() => fn('the client went away'));
        else signal.addEventListener('abort', () => fn('the client went away'), { once: true });
      },
    };
    const driver = new CallDriver(sink, tenant, deps, ctx.header('traceparent'));
    // The client went away: its slot is given back at once, its work stops (through onGone),
    // and nobody waits for an answer.
    const gone = () => {
      driver.gone();
      reject(new GatewayError(status.CANCELLED, 'the client went away'));
    };
    if (signal.aborted) return gone();
    signal.addEventListener('abort', gone, { once: true });
    driver.receive(
      create(CallToolInputSchema, {
        msg: {
          case: 'start',
          // Cards reach a call whose input has ended (and fail closed); bridged calls go nowhere.
          value: { ...start, acceptsQuestions: true, acceptsBridgeCalls: false },
        },
      }),
    );
    driver.inputEnded(NO_INPUT);
  });
}
