import { create } from '@bufbuild/protobuf';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import {
  Approval,
  ApprovalsSchema,
  EgressSchema,
  FeaturesSchema,
  LimitsSchema,
  PauseDepth,
  QuestionsFeatureSchema,
  RunPauseSchema,
  RunSchema,
  RunStart,
  RunState,
  RunUsageSchema,
  type CreateRunRequest,
  type Run,
  type RunPause,
} from '@tether/contract';
import type { ApprovalPolicy, PauseInfo, RunRecord, RunSpec } from '../runs/RunRecord';
import type { SandboxUsage } from '../sandbox/provider';

const approvalFrom = (a: Approval | undefined, fallback: ApprovalPolicy): ApprovalPolicy =>
  a === Approval.AUTO ? 'AUTO' : a === Approval.PROMPT ? 'PROMPT' : a === Approval.DENY ? 'DENY' : fallback;

const approvalTo = (a: ApprovalPolicy): Approval =>
  a === 'AUTO' ? Approval.AUTO : a === 'PROMPT' ? Approval.PROMPT : Approval.DENY;

export function specFromRequest(req: CreateRunRequest): RunSpec {
  const f = req.features;
  return {
    conversationId: req.conversationId,
    workspace: req.workspace,
    features: {
      lsp: !!f?.lsp,
      ast: !!f?.ast,
      debug: !!f?.debug,
      eval: !!f?.eval,
      questions: { enabled: !!f?.questions?.enabled, targetSpace: f?.questions?.targetSpace ?? '' },
      vibe: !!f?.vibe,
      commands: !!f?.commands,
    },
    // Unspecified approvals default to AUTO: the platform opts into prompts per tier.
    approvals: { write: approvalFrom(req.approvals?.write, 'AUTO'), exec: approvalFrom(req.approvals?.exec, 'AUTO') },
    labels: { ...req.labels },
    limits: {
      memoryMb: req.limits?.memoryMb ?? 0,
      cpuMillis: req.limits?.cpuMillis ?? 0,
      pids: req.limits?.pids ?? 0,
      diskMb: req.limits?.diskMb ?? 0,
    },
    template: req.template,
    ...(req.egress ? { egress: [...req.egress.allow] } : {}),
  };
}

const stateTo = {
  STARTING: RunState.STARTING,
  READY: RunState.READY,
  FAILED: RunState.FAILED,
  STOPPED: RunState.STOPPED,
  PAUSING: RunState.PAUSING,
  PAUSED: RunState.PAUSED,
} as const;

function pauseToProto(p: PauseInfo): RunPause {
  return create(RunPauseSchema, {
    depth: p.depth === 'memory' ? PauseDepth.MEMORY : PauseDepth.PORTABLE,
    pausedAt: timestampFromDate(p.pausedAt),
    reason: p.reason,
    stateBytes: BigInt(p.stateBytes),
    notKept: p.notKept,
    resumedAt: p.resumedAt && timestampFromDate(p.resumedAt),
  });
}

export function runToProto(r: RunRecord, usage?: SandboxUsage): Run {
  const f = r.spec.features;
  return create(RunSchema, {
    runId: r.runId,
    tenant: r.tenant,
    state: stateTo[r.state],
    error: r.error,
    createdAt: timestampFromDate(r.createdAt),
    conversationId: r.spec.conversationId,
    labels: r.spec.labels,
    features: create(FeaturesSchema, {
      lsp: f.lsp,
      ast: f.ast,
      debug: f.debug,
      eval: f.eval,
      vibe: f.vibe,
      commands: !!f.commands,
      questions: create(QuestionsFeatureSchema, { enabled: f.questions.enabled, targetSpace: f.questions.targetSpace }),
    }),
    approvals: create(ApprovalsSchema, {
      write: approvalTo(r.spec.approvals.write),
      exec: approvalTo(r.spec.approvals.exec),
    }),
    limits: create(LimitsSchema, { ...r.spec.limits, diskMb: r.spec.limits.diskMb ?? 0 }),
    start: r.start === 'pool' ? RunStart.POOL : r.start === 'template' ? RunStart.TEMPLATE : RunStart.COLD,
    startNote: r.startNote ?? '',
    usage:
      usage &&
      create(RunUsageSchema, {
        diskBytes: BigInt(usage.diskBytes),
        memoryBytes: BigInt(usage.memoryBytes),
        cpuTimeMs: BigInt(usage.cpuMillis),
      }),
    template: r.spec.template ?? '',
    egress: r.spec.egress ? create(EgressSchema, { allow: r.spec.egress }) : undefined,
    pause: r.pause && pauseToProto(r.pause),
    // A run restored from its template's snapshot is no tenant's fork: the snapshot's run is the gateway's own.
    forkedFrom: r.start === 'template' ? '' : (r.spec.forkedFrom ?? ''),
  });
}
