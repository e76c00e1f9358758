import type { CallToolInput, CallToolStart } from '@tether/contract';
import type { ToolResult } from '../../../protocol/src/tools';
import type { ToolInvoker } from '../calls/ToolInvoker';
import { invalid } from '../errors';
import { logger } from '../log';
import { statusName, Telemetry, type ObservedCall } from '../observability/Telemetry';
import type { ReadyRun } from '../runs/RunRecord';
import { maxTierOf } from '../surfaces';
import type { Tenancy } from '../tenancy/Tenancy';
import type { CallSink } from './callSink';
import { CallStream } from './callStream';
import { toStatus } from './edge';

export interface CallDeps {
  /** The run for a call; a paused one is resumed first (the promise). */
  runs: { ready(tenant: string, runId: string): ReadyRun | Promise<ReadyRun> };
  tenancy: Tenancy;
  invoker: ToolInvoker;
  questionTimeoutSeconds: number;
  telemetry?: Telemetry;
}

/**
 * One tool call from its first message to its result or status, whatever stream carries it
 * (its own CallTool stream, or its id on a Calls stream): the first message starts it and
 * takes one of the tenant's slots (or waits in the tenant's line) and hands the call to the
 * ToolInvoker with its CallStream as the port; later ones (answers, bridge results, cancel) go
 * to that CallStream.
 */
export class CallDriver {
  private stream?: CallStream;
  private observed?: ObservedCall;
  private started = false;
  /** Messages and the half-close that arrive while the call waits for one of the tenant's slots. */
  private readonly early: CallToolInput[] = [];
  private endedEarly: string | boolean = false;
  private waitingStart?: CallToolStart;
  private leaveLine?: () => void;
  private release?: () => void;

  constructor(
    private readonly sink: CallSink,
    private readonly tenant: string,
    private readonly deps: CallDeps,
    private readonly traceparent: string | undefined,
  ) {}

  receive(msg: CallToolInput): void {
    if (this.stream) {
      this.stream.receive(msg);
      return;
    }
    if (this.started) {
      this.early.push(msg);
      // Cancelled while waiting for a slot: out of the line, and answered as cancelled at once
      // (the call begins without a slot and its replayed cancel stops it before the tool runs).
      if (msg.msg.case === 'cancel' && this.waitingStart) {
        const start = this.waitingStart;
        this.waitingStart = undefined;
        this.free();
        this.begin(start);
      }
      return;
    }
    if (msg.msg.case !== 'start') {
      this.abortWith(invalid('the first message must be start'));
      return;
    }
    this.started = true;
    const start = msg.msg.value;
    this.waitingStart = start;
    // The tenant's slots in flight: past them the call waits in the tenant's own line.
    const slots = this.deps.tenancy.callSlots(this.tenant);
    this.leaveLine = slots.enter((release) => {
      this.waitingStart = undefined;
      this.leaveLine = undefined;
      this.release = release;
      if (this.sink.gone) this.free();
      else this.begin(start);
    });
    if (!this.leaveLine) {
      this.waitingStart = undefined;
      this.abortWith(this.deps.tenancy.callLineFull(this.tenant));
    }
  }

  /** The client half-closed (or the call has no input side): nobody can answer its cards any more. */
  inputEnded(reason?: string): void {
    if (this.stream) this.stream.inputEnded(reason);
    else this.endedEarly = reason ?? true;
  }

  /** The carrying stream failed: the call stops. */
  streamFailed(): void {
    this.stream?.cancel('the stream failed');
  }

  /**
   * The client went away: the call leaves the line, or gives its slot back at once (its
   * stream cancels the work under way), so a slot never outlives its client.
   */
  gone(): void {
    this.free();
  }

  private free(): void {
    this.leaveLine?.();
    this.release?.();
    this.leaveLine = this.release = undefined;
  }

  private abortWith(err: unknown): void {
    this.free();
    this.stream?.dispose();
    const st = toStatus(err);
    this.observed?.finish(statusName(st.code));
    this.sink.fail(st);
  }

  private begin(start: CallToolStart): void {
    const { deps, tenant } = this;
    const obs = (this.observed = (deps.telemetry ?? Telemetry.off).call(tenant, start, this.traceparent));
    void (async () => {
      const run = await deps.runs.ready(tenant, start.runId);
      const s = (this.stream = new CallStream(
        this.sink,
        start,
        run.spec.features.questions.targetSpace,
        deps.questionTimeoutSeconds,
      ));
      for (const m of this.early.splice(0)) s.receive(m);
      if (this.endedEarly) s.inputEnded(typeof this.endedEarly === 'string' ? this.endedEarly : undefined);
      const invoked = Date.now();
      const result = await deps.invoker.invoke(run, start.tool, start.argumentsJson, {
        cap: maxTierOf(start.surface),
        port: s,
        observed: obs,
      });
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
      const notice = run.takeResumeNotice();
      this.finish(
        s,
        obs,
        notice ? { ...result, content: [{ type: 'text', text: notice }, ...result.content] } : result,
      );
    })().catch((err: unknown) => this.abortWith(err));
  }

  /**
   * The result ends the call and frees its slot; a call cancelled meanwhile counts as
   * cancelled. The result is written before the call is reported: its metrics, span and audit
   * record (which measures the result by serializing it) follow in the same turn, before
   * anything else runs, instead of holding the reply back.
   */
  private finish(stream: CallStream, obs: ObservedCall, result: ToolResult): void {
    this.free();
    const outcome = stream.signal.aborted ? 'cancelled' : result.isError ? 'is_error' : 'ok';
    stream.finish(result);
    obs.finish(outcome, result);
  }
}
