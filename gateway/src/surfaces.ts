import type { Tier } from '../../protocol/src/tools';
import { TIER_ORDER } from '../../protocol/src/tools';
import { AgentKind, SurfaceMode, Tier as PbTier, type Surface } from '@tether/contract';

/** The highest tier a surface may see: plan mode and read-only subagents are capped at read. */
export function maxTierOf(surface: Surface | undefined): Tier {
  if (surface?.mode === SurfaceMode.PLAN) return 'read';
  if (surface?.agent === AgentKind.READ_ONLY_SUBAGENT) return 'read';
  return 'exec';
}

export function visible(toolTier: Tier, cap: Tier): boolean {
  return TIER_ORDER[toolTier] <= TIER_ORDER[cap];
}

export function tierToProto(t: Tier): PbTier {
  return t === 'read' ? PbTier.READ : t === 'write' ? PbTier.WRITE : PbTier.EXEC;
}
