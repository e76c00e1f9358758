import type { ServerDuplexStream } from '@grpc/grpc-js';
import type { CallToolInput, CallToolOutput, CallToolStart } from '../../../gen/tether/v1/gateway_pb';
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
  let started = false;
  // Messages and the half-close that arrive while the call waits for one of the tenant's slots.
  const early: CallToolInput[] = [];
  let endedEarly = false;
  let leaveLine: (() => void) | undefined;
  let release: (() => void) | undefined;
  const free = () => {
    leaveLine?.();
    release?.();
    leaveLine = release = undefined;
  };
  const abortWith = (err: unknown) => {
    free();
    stream?.dispose();
    const st = toStatus(err);
    observed?.finish(statusName(st.code));
    fail(st);
  };
  const begin = (start: CallToolStart) => {
    const traceparent = call.metadata.get('traceparent')[0];
    const obs = (observed = (deps.telemetry ?? Telemetry.off).call(
      tenant,
      start,
      typeof traceparent === 'string' ? traceparent : undefined,
    ));
    void (async () => {
      const run = deps.runs.ready(tenant, start.runId);
      const s = (stream = new CallStream(
        call,
        start,
        run.spec.features.questions.targetSpace,
        deps.questionTimeoutSeconds,
        obs,
      ));
      for (const m of early.splice(0)) s.receive(m);
      if (endedEarly) s.inputEnded();
      const cap = maxTierOf(start.surface);
      const desc = run.tool(start.tool);
      if (!desc || !visible(desc.tier, cap)) throw new ToolAbsentError(start.tool);
      const parsed = parseArguments(start.argumentsJson);
      obs.resolved(desc.tier, parsed.ok ? parsed.value : {});
      if (!parsed.ok) return finish(s, obs, errorResult(parsed.error), free);
      const invoked = Date.now();
      const result = await deps.invoker.invoke(run, start.tool, parsed.value, { cap, stream: s });
      logger.debug(
        {
          runId: run.runId,
          tool: start.tool,
          callId: start.callId,
          ms: Date.now() - invoked,
          isError: !!result.isError,
        },
        'call',
      );
      finish(s, obs, result, free);
    })().catch(abortWith);
  };
  let waitingStart: CallToolStart | undefined;
  call.on('data', (msg: CallToolInput) => {
    if (stream) return stream.receive(msg);
    if (started) {
      early.push(msg);
      // Cancelled while waiting for a slot: out of the line, and answered as cancelled at once
      // (the call begins without a slot and its replayed cancel stops it before the tool runs).
      if (msg.msg.case === 'cancel' && waitingStart) {
        const start = waitingStart;
        waitingStart = undefined;
        free();
        begin(start);
      }
      return;
    }
    if (msg.msg.case !== 'start') return abortWith(invalid('CallTool: the first message must be start'));
    started = true;
    const start = msg.msg.value;
    waitingStart = start;
    // The tenant's slots in flight: past them the call waits in the tenant's own line.
    leaveLine = deps.runs.tenancy.callSlots(tenant).enter((r) => {
      waitingStart = undefined;
      leaveLine = undefined;
      release = r;
      if (call.cancelled || call.destroyed) return free();
      begin(start);
    });
    if (!leaveLine) {
      waitingStart = undefined;
      abortWith(deps.runs.tenancy.callLineFull(tenant));
    }
  });
  call.on('end', () => (stream ? stream.inputEnded() : (endedEarly = true)));
  call.on('error', () => stream?.cancel('the stream failed'));
  // A call that goes away leaves the line, or gives its slot back at once (its stream
  // cancels the work under way): a slot never outlives its client.
  call.on('cancelled', free);
}

/**
 * The result ends the stream and frees the call's slot; a call whose stream was cancelled
 * meanwhile counts as cancelled. The result is written before the call is reported: its metrics,
 * span and audit record (which measures the result by serializing it) follow in the same turn,
 * before anything else runs, instead of holding the reply back.
 */
function finish(stream: CallStream, obs: ObservedCall, result: ToolResult, free: () => void): void {
  free();
  const outcome = stream.signal.aborted ? 'cancelled' : result.isError ? 'is_error' : 'ok';
  stream.finish(result);
  obs.finish(outcome, result);
}
