import type { ServerDuplexStream } from '@grpc/grpc-js';
import type { CallToolInput, CallToolOutput } from '../../../gen/tether/v1/gateway_pb';
import { CallStream } from '../calls/CallStream';
import { errorResult } from '../calls/results';
import { ToolAbsentError, type ToolInvoker } from '../calls/ToolInvoker';
import { invalid } from '../errors';
import { statusName, Telemetry, type ObservedCall } from '../observability/Telemetry';
import { toStatus } from './edge';
import { logger } from '../log';
import type { RunManager } from '../runs/RunManager';
import type { ToolResult } from '../../../protocol/src/tools';
import { maxTierOf, visible } from '../surfaces';
import { parseArguments } from '../validation';

/**
 * One CallTool stream, admitted past the tenant's rate limit (the edge checks it when the
 * stream opens, before this runs): the first message starts the call, later ones (answers, bridge
 * results, cancel) go to its CallStream; the result ends the stream, a failure its status.
 */
export function serveCallTool(
  call: ServerDuplexStream<CallToolInput, CallToolOutput>,
  tenant: string,
  fail: (err: unknown) => void,
  deps: { runs: RunManager; invoker: ToolInvoker; questionTimeoutSeconds: number; telemetry?: Telemetry },
): void {
  let stream: CallStream | undefined;
  let observed: ObservedCall | undefined;
  const abortWith = (err: unknown) => {
    stream?.dispose();
    const st = toStatus(err);
    observed?.finish(statusName(st.code));
    fail(st);
  };
  call.on('data', (msg: CallToolInput) => {
    if (stream) return stream.receive(msg);
    if (msg.msg.case !== 'start') return abortWith(invalid('CallTool: the first message must be start'));
    const start = msg.msg.value;
    const traceparent = call.metadata.get('traceparent')[0];
    const obs = (observed = (deps.telemetry ?? Telemetry.off).call(
      tenant,
      start,
      typeof traceparent === 'string' ? traceparent : undefined,
    ));
    void (async () => {
      const run = deps.runs.ready(tenant, start.runId);
      stream = new CallStream(call, start, run.spec.features.questions.targetSpace, deps.questionTimeoutSeconds, obs);
      const cap = maxTierOf(start.surface);
      const desc = run.tool(start.tool);
      if (!desc || !visible(desc.tier, cap)) throw new ToolAbsentError(start.tool);
      const parsed = parseArguments(start.argumentsJson);
      obs.resolved(desc.tier, parsed.ok ? parsed.value : {});
      if (!parsed.ok) return finish(stream, obs, errorResult(parsed.error));
      const started = Date.now();
      const result = await deps.invoker.invoke(run, start.tool, parsed.value, { cap, stream });
      logger.debug(
        {
          runId: run.runId,
          tool: start.tool,
          callId: start.callId,
          ms: Date.now() - started,
          isError: !!result.isError,
        },
        'call',
      );
      finish(stream, obs, result);
    })().catch(abortWith);
  });
  call.on('end', () => stream?.inputEnded());
  call.on('error', () => stream?.cancel('the stream failed'));
}

/** The result ends the stream; a call whose stream was cancelled meanwhile counts as cancelled. */
function finish(stream: CallStream, obs: ObservedCall, result: ToolResult): void {
  obs.finish(stream.signal.aborted ? 'cancelled' : result.isError ? 'is_error' : 'ok', result);
  stream.finish(result);
}
