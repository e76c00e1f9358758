import type { RunnerPhase } from '../../../protocol/src/tools';
import type { TraceSpan } from './tracing';

/** Bounds on what a runner may add to a trace: code runs beside the runner, so its word is checked. */
const MAX_PHASES = 64;
const MAX_ATTRIBUTES = 8;
const MAX_TEXT = 200;

const isTime = (n: unknown): n is number => typeof n === 'number' && Number.isFinite(n) && n >= 0 && n < 864e5;

function attributesOf(a: unknown): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  if (!a || typeof a !== 'object') return out;
  for (const [k, v] of Object.entries(a).slice(0, MAX_ATTRIBUTES)) {
    if (typeof v === 'string') out[k.slice(0, 64)] = v.slice(0, MAX_TEXT);
    else if (typeof v === 'number' || typeof v === 'boolean') out[k.slice(0, 64)] = v;
  }
  return out;
}

/** The runner's phases of one call, as children of the gateway's `runner` span; malformed ones are dropped. */
export function recordRunnerPhases(runner: TraceSpan, phases: unknown): void {
  if (!Array.isArray(phases)) return;
  for (const p of phases.slice(0, MAX_PHASES) as Partial<RunnerPhase>[]) {
    if (!p || typeof p.name !== 'string' || !isTime(p.startMs) || !isTime(p.durationMs)) continue;
    runner.record(
      p.name.slice(0, 64),
      p.startMs,
      p.durationMs,
      { ...attributesOf(p.attributes), 'tether.side': 'runner' },
      typeof p.error === 'string' ? p.error.slice(0, MAX_TEXT) : undefined,
    );
  }
}
