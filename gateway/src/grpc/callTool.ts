import type { ServerDuplexStream } from '@grpc/grpc-js';
import type { CallToolInput, CallToolOutput } from '../../../gen/tether/v1/gateway_pb';
import { CallStream } from '../calls/CallStream';
import { errorResult } from '../calls/results';
import { ToolAbsentError, type ToolInvoker } from '../calls/ToolInvoker';
import { invalid } from '../errors';
import { logger } from '../log';
import type { RunManager } from '../runs/RunManager';
import { maxTierOf, visible } from '../surfaces';
import { parseArguments } from '../validation';

/**
 * One CallTool stream: the first message starts the call, later ones (answers, bridge
 * results, cancel) go to its CallStream; the result ends the stream, a failure its status.
 */
export function serveCallTool(
  call: ServerDuplexStream<CallToolInput, CallToolOutput>,
  tenant: string,
  fail: (err: unknown) => void,
  deps: { runs: RunManager; invoker: ToolInvoker; questionTimeoutSeconds: number },
): void {
  let stream: CallStream | undefined;
  const abortWith = (err: unknown) => {
    stream?.dispose();
    fail(err);
  };
  call.on('data', (msg: CallToolInput) => {
    if (stream) return stream.receive(msg);
    if (msg.msg.case !== 'start') return abortWith(invalid('CallTool: the first message must be start'));
    const start = msg.msg.value;
    void (async () => {
      deps.runs.tenancy.limitRate(tenant, 'callTool');
      const run = deps.runs.ready(tenant, start.runId);
      stream = new CallStream(call, start, run.spec.features.questions.targetSpace, deps.questionTimeoutSeconds);
      const cap = maxTierOf(start.surface);
      const desc = run.tool(start.tool);
      if (!desc || !visible(desc.tier, cap)) throw new ToolAbsentError(start.tool);
      const parsed = parseArguments(start.argumentsJson);
      if (!parsed.ok) return stream.finish(errorResult(parsed.error));
      const started = Date.now();
      const result = await deps.invoker.invoke(run, start.tool, parsed.value, { cap, stream });
      logger.debug({ runId: run.runId, tool: start.tool, callId: start.callId, ms: Date.now() - started, isError: !!result.isError }, 'call');
      stream.finish(result);
    })().catch(abortWith);
  });
  call.on('end', () => stream?.inputEnded());
  call.on('error', () => stream?.cancel('the stream failed'));
}
