import { status } from '@grpc/grpc-js';
import { AgentKind, SurfaceMode, type Surface } from '@tether/contract';
import type { Tier, ToolResult } from '../../../protocol/src/tools';
import type { ResourcesPayload } from '../../../protocol/src/resources';
import type { EgressRecord } from '../egress/log';
import type { RunRecord } from '../runs/RunRecord';
import type { RefusalReport } from '../tenancy/RefusalTally';
import { logger } from '../log';
import { AuditLog, summarizeForAudit } from './audit';
import {
  Metrics,
  UNKNOWN_TOOL,
  failureReason,
  type AnswerKind,
  type ApprovalDecision,
  type CallOutcome,
  type RunCensus,
} from './metrics';
import { startTracing, type TraceSpan, type Tracer } from './tracing';

export interface TelemetryConfig {
  metrics: { listen: string };
  tracing: { otlpEndpoint: string; serviceName: string };
  audit: { path: string };
}

/** The status name a failed call is labelled with (NOT_FOUND, UNAVAILABLE, ...). */
export function statusName(code: status): string {
  return status[code] ?? 'UNKNOWN';
}

/** A caller's surface as a short word pair, e.g. `default/main`, `plan/read_only_subagent`. */
export function surfaceName(s: Surface | undefined): string {
  return `${(SurfaceMode[s?.mode ?? 0] ?? 'UNSPECIFIED').toLowerCase()}/${(AgentKind[s?.agent ?? 0] ?? 'UNSPECIFIED').toLowerCase()}`;
}

/**
 * Where the gateway reports what happens: metrics, audit log and traces, each present only
 * when configured. Hooks call these methods and never need to know which sinks exist.
 */
export class Telemetry {
  static readonly off = new Telemetry();

  constructor(
    readonly metrics?: Metrics,
    readonly audit?: AuditLog,
    readonly tracer?: Tracer,
  ) {}

  static async start(config: TelemetryConfig): Promise<Telemetry> {
    const metrics = config.metrics.listen ? new Metrics() : undefined;
    const audit = config.audit.path ? new AuditLog(config.audit.path) : undefined;
    const tracer = await startTracing(config.tracing);
    return metrics || audit || tracer ? new Telemetry(metrics, audit, tracer) : Telemetry.off;
  }

  watchRuns(census: RunCensus): void {
    this.metrics?.watchRuns(census);
  }

  runCreated(run: RunRecord, ms: number, hostWorkspace: boolean): void {
    const ok = run.state === 'READY';
    this.metrics?.runsCreated.inc({ tenant: run.tenant });
    this.metrics?.createRunSeconds.observe({ start: run.start, outcome: ok ? 'ready' : 'failed' }, ms / 1000);
    const { features, limits, labels } = run.spec;
    this.audit?.write({
      event: 'run.created',
      tenant: run.tenant,
      runId: run.runId,
      state: run.state,
      limits: { memoryMb: limits.memoryMb, cpuMillis: limits.cpuMillis, pids: limits.pids },
      workspace: hostWorkspace ? 'host' : 'managed',
      features: Object.entries(features)
        .filter(([, f]) => f === true || (typeof f === 'object' && f.enabled))
        .map(([k]) => k),
      labels: Object.keys(labels),
      durationMs: Math.round(ms),
      ...(ok ? {} : { error: run.error }),
    });
  }

  /**
   * The runner's report of its language servers and kernels: kept on the run for the gauges,
   * its news counted. A replay to a gateway that just connected is a baseline, not news.
   */
  runResources(run: RunRecord, payload: ResourcesPayload): void {
    if (!this.metrics || !Array.isArray(payload?.resources)) return;
    const now = payload.resources
      .slice(0, 64)
      .filter(
        (c) =>
          c &&
          (c.kind === 'language_server' || c.kind === 'kernel') &&
          typeof c.name === 'string' &&
          Number.isFinite(c.alive),
      );
    if (run.resources || !payload.replay) this.metrics.countResources(run.resources ?? [], now);
    run.resources = now;
  }

  runFailed(run: RunRecord, reason: string): void {
    this.metrics?.runsFailed.inc({ tenant: run.tenant, reason: failureReason(reason) });
    this.audit?.write({ event: 'run.failed', tenant: run.tenant, runId: run.runId, reason });
  }

  runStopped(run: RunRecord): void {
    this.metrics?.runLifetimeSeconds.observe({ tenant: run.tenant }, (Date.now() - run.createdAt.getTime()) / 1000);
  }

  /** A pause or a resume ended (ok: the run is PAUSED, or READY again). */
  runMoved(
    run: RunRecord,
    move: 'pause' | 'resume',
    e: { depth: string; ok: boolean; ms: number; detail: string; stateBytes?: number },
  ): void {
    this.metrics?.pauseSeconds.observe({ move, depth: e.depth, outcome: e.ok ? 'ok' : 'failed' }, e.ms / 1000);
    if (move === 'pause' && e.ok && e.stateBytes !== undefined)
      this.metrics?.pauseStateBytes.observe({ depth: e.depth }, e.stateBytes);
    this.audit?.write({
      event: move === 'pause' ? 'run.paused' : 'run.resumed',
      tenant: run.tenant,
      runId: run.runId,
      ...e,
    });
  }

  runDeleted(run: RunRecord, stateBefore: string): void {
    this.metrics?.runsDeleted.inc({ tenant: run.tenant });
    this.audit?.write({
      event: 'run.deleted',
      tenant: run.tenant,
      runId: run.runId,
      lifetimeMs: Date.now() - run.createdAt.getTime(),
      state: stateBefore,
    });
  }

  rpc(method: string, code: status): void {
    this.metrics?.rpcs.inc({ method, code: statusName(code) });
  }

  /** One request through a run's egress proxy, allowed or refused. */
  egress(r: EgressRecord): void {
    this.metrics?.egressRequests.inc({ tenant: r.tenant, outcome: r.allowed ? 'allowed' : 'refused' });
    this.audit?.write({
      event: 'egress',
      tenant: r.tenant,
      runId: r.runId,
      method: r.method,
      host: r.host.slice(0, 253),
      port: r.port,
      allowed: r.allowed,
      ...(r.reason ? { reason: r.reason.slice(0, 300) } : {}),
      bytesIn: r.bytesIn,
      bytesOut: r.bytesOut,
      durationMs: r.durationMs,
    });
  }

  /**
   * Rate-limit refusals of one tenant and kind over one window (a second): one metric
   * increment, audit record and log line per window, however many calls were refused.
   */
  rateLimited(r: RefusalReport): void {
    this.metrics?.rateLimited.inc({ tenant: r.tenant, kind: r.kind }, r.refused);
    this.audit?.write({
      event: 'rate.limited',
      tenant: r.tenant,
      kind: r.kind,
      refused: r.refused,
      since: r.since.toISOString(),
      windowMs: r.windowMs,
    });
    logger.warn(
      { tenant: r.tenant, kind: r.kind, refused: r.refused, windowMs: r.windowMs },
      'calls refused by the rate limit',
    );
  }

  authFailed(method: string, peer: string, reason: 'missing' | 'invalid'): void {
    this.metrics?.authFailures.inc({ method });
    this.audit?.write({ event: 'auth.failed', method, peer, reason });
  }

  call(
    tenant: string,
    start: { runId: string; tool: string; callId: string; surface?: Surface; argumentsJson: string },
    traceparent: string | undefined,
  ): ObservedCall {
    return new ObservedCall(this, tenant, start, traceparent, surfaceName(start.surface));
  }
}

/**
 * One tool call as it is reported: filled in as the call proceeds (its tool's tier, the
 * approval decision, questions and bridged calls) and written out once when it ends.
 */
export class ObservedCall {
  private readonly began = performance.now();
  private readonly span?: TraceSpan;
  private done = false;
  tier: Tier | 'unknown' = 'unknown';
  toolLabel = UNKNOWN_TOOL;
  approval: ApprovalDecision = 'not_required';
  bridged = 0;
  questions = 0;
  private args: Record<string, unknown> = {};

  constructor(
    private readonly t: Telemetry,
    private readonly tenant: string,
    private readonly start: { runId: string; tool: string; callId: string; argumentsJson: string },
    traceparent: string | undefined,
    private readonly surface: string,
  ) {
    t.metrics?.callsInFlight.inc();
    this.span = t.tracer?.start('CallTool', traceparent, {
      'tether.tenant': tenant,
      'tether.run_id': start.runId,
      'tether.tool': start.tool,
      'tether.surface': surface,
    });
  }

  /** The call named a tool the run has: its name becomes a label. */
  resolved(tier: Tier, args: Record<string, unknown>): void {
    this.tier = tier;
    this.toolLabel = this.start.tool;
    this.args = args;
    this.span?.set({ 'tether.tier': tier });
  }

  /** A child span for one phase of the call (validate, approval, runner), or undefined when not tracing. */
  phase(name: string, attrs?: Record<string, string | number | boolean>): TraceSpan | undefined {
    return this.span?.child(name, attrs);
  }

  approvalDecided(tier: Tier, decision: ApprovalDecision, topLevel: boolean): void {
    if (decision !== 'not_required') this.t.metrics?.approvals.inc({ tier, decision });
    if (topLevel) this.approval = decision;
  }

  question(kind: 'ask' | 'permission', answer: AnswerKind, options: number): void {
    this.questions++;
    this.t.metrics?.questions.inc({ kind, answer });
    this.t.audit?.write({
      event: 'question',
      tenant: this.tenant,
      runId: this.start.runId,
      callId: this.start.callId,
      kind,
      answer,
      options,
    });
  }

  bridgedCall(tool: string, target: 'gateway' | 'client' | 'refused', result: ToolResult): void {
    this.bridged++;
    const outcome = result.isError ? 'is_error' : 'ok';
    this.t.metrics?.bridged.inc({ target, outcome });
    if (target !== 'refused')
      this.t.audit?.write({
        event: 'tool.bridged',
        tenant: this.tenant,
        runId: this.start.runId,
        callId: this.start.callId,
        tool,
        target,
        outcome,
      });
  }

  /** Ends the call once: with its result (ok, is_error, cancelled) or the status it failed with. */
  finish(outcome: CallOutcome, result?: ToolResult): void {
    if (this.done) return;
    this.done = true;
    const seconds = (performance.now() - this.began) / 1000;
    const labels = { tool: this.toolLabel, tier: this.tier, outcome };
    const m = this.t.metrics;
    if (m) {
      m.callsInFlight.dec();
      m.calls.inc(labels);
      m.callSeconds.observe(labels, seconds);
    }
    if (this.span) {
      this.span.set({ 'tether.outcome': outcome });
      if (outcome !== 'ok') this.span.fail(outcome);
      this.span.end();
    }
    this.t.audit?.write({
      event: 'tool.call',
      tenant: this.tenant,
      runId: this.start.runId,
      callId: this.start.callId,
      tool: this.toolLabel === UNKNOWN_TOOL ? this.start.tool.slice(0, 128) : this.toolLabel,
      tier: this.tier,
      surface: this.surface,
      approval: this.approval,
      outcome,
      durationMs: Math.round(seconds * 1000),
      bytesIn: Buffer.byteLength(this.start.argumentsJson),
      bytesOut: result ? Buffer.byteLength(JSON.stringify(result)) : 0,
      arguments: summarizeForAudit(this.args, Buffer.byteLength(this.start.argumentsJson)),
      bridged: this.bridged,
      questions: this.questions,
    });
  }
}
