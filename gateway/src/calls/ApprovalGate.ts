import type { Tier } from '../../../protocol/src/tools';
import type { AnswerKind, ApprovalDecision } from '../observability/metrics';
import type { ApprovalPolicy } from '../runs/RunRecord';
import type { CallPort } from './CallPort';

/** A short, readable rendering of a call's arguments for a permission card. */
export function summarizeArguments(args: Record<string, unknown>, maxValue = 160): string {
  const parts = Object.entries(args).map(([k, v]) => {
    let s = typeof v === 'string' ? v : JSON.stringify(v);
    if (s === undefined) s = String(v);
    const lines = s.split('\n').length;
    if (s.length > maxValue) s = `${s.slice(0, maxValue)}… (${s.length} chars${lines > 1 ? `, ${lines} lines` : ''})`;
    return `${k}: ${s}`;
  });
  return parts.join('\n');
}

/** The gate's decision; `card` is how a PERMISSION card shown for it was answered. */
export type GateDecision = { decision: ApprovalDecision; card?: AnswerKind } & (
  | { allowed: true }
  | { allowed: false; message: string }
);

/**
 * The approval prompt for write- and exec-tier tools, applied once per call wherever a call
 * enters the registry. PROMPT with nobody to ask is a refusal (fail-closed).
 */
export async function checkApproval(
  policies: { write: ApprovalPolicy; exec: ApprovalPolicy },
  tool: string,
  tier: Tier,
  args: Record<string, unknown>,
  port: CallPort,
): Promise<GateDecision> {
  if (tier === 'read') return { allowed: true, decision: 'not_required' };
  const policy = policies[tier];
  if (policy === 'AUTO') return { allowed: true, decision: 'auto' };
  if (policy === 'DENY') {
    return {
      allowed: false,
      decision: 'policy_denied',
      message: `refused: this run's policy denies ${tier}-tier tools, so ${tool} cannot run here. Do not retry; continue without it or ask the user how to proceed.`,
    };
  }
  const outcome = await port.askPermission(`Allow ${tool} (${tier} tier)?`, summarizeArguments(args));
  if (outcome.kind === 'approved') return { allowed: true, decision: 'approved', card: 'approved' };
  return {
    allowed: false,
    decision: 'denied',
    card: outcome.card,
    message: `refused: ${tool} was not approved (${outcome.reason}). Do not retry the same call; adjust the plan or ask the user.`,
  };
}
