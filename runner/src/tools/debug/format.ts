import type { Availability } from './availability';
import { whyUnavailable } from './availability';
import type { BreakpointsOutcome } from './supervisor';
import { PROGRAM_ENDED, type FrameView, type Outcome, type StopInfo, type VariableView } from './session';

type Paths = { displayPath(abs: string): string };

export function formatLocation(stop: StopInfo, paths: Paths): string {
  const loc = stop.location;
  if (!loc) return `thread ${stop.threadId ?? '?'} (location unknown)`;
  const where = loc.file ? `${paths.displayPath(loc.file)}:${loc.line ?? '?'}` : '(no source)';
  const src = loc.sourceLine !== undefined ? `\n  ${String(loc.line).padStart(5)} | ${loc.sourceLine}` : '';
  return `${where} in ${loc.function} (thread ${stop.threadId})${src}`;
}

export function formatOutcome(outcome: Outcome, paths: Paths, outputTail: string, waitedFor: number): string {
  switch (outcome.kind) {
    case 'stopped': {
      const s = outcome.stop;
      const why = s.description && s.description !== s.reason ? `${s.reason}: ${s.description}` : s.reason;
      return `stopped (${why}) at ${formatLocation(s, paths)}`;
    }
    case 'ended': {
      const code = outcome.exitCode === undefined ? 'exit code not reported' : `exit code ${outcome.exitCode}`;
      const tail = outputTail ? `\n--- last output ---\n${outputTail}` : '\n(no output)';
      const why = outcome.reason === PROGRAM_ENDED ? '' : `: ${outcome.reason}`;
      return `the program ended (${code})${why}. The session is closed; breakpoints are kept for the next launch.${tail}`;
    }
    case 'running':
      return `still running after ${Math.round(waitedFor / 100) / 10}s without stopping. Use op "pause" to stop it where it is, "status" to check again, or "output" to see what it printed.`;
  }
}

export function outcomeStructured(outcome: Outcome, paths: Paths): Record<string, unknown> {
  switch (outcome.kind) {
    case 'stopped': {
      const s = outcome.stop;
      return {
        state: 'stopped',
        stop: s.number,
        reason: s.reason,
        description: s.description,
        threadId: s.threadId,
        function: s.location?.function,
        file: s.location?.file ? paths.displayPath(s.location.file) : undefined,
        line: s.location?.line,
        sourceLine: s.location?.sourceLine,
      };
    }
    case 'ended':
      return { state: 'ended', exitCode: outcome.exitCode, reason: outcome.reason };
    case 'running':
      return { state: 'running', waitedMs: outcome.waitedMs };
  }
}

export function formatAdapters(rows: Availability[], paths: Paths, problems: string[] = []): string {
  const lines = rows.map((r) => {
    if (!r.available)
      return `${r.id.padEnd(8)} unavailable — ${whyUnavailable(r)} (command: ${r.command}${r.source ? `; declared in ${r.source}` : ''})`;
    const marker = r.root ? `${r.root.marker} in ${paths.displayPath(r.root.dir)}` : '';
    return `${r.id.padEnd(8)} available — ${r.command}; root marker ${marker}; ${r.binary?.detail}`;
  });
  return [...lines, ...problems.map((p) => `not used: ${p}`)].join('\n');
}

export function formatBreakpoints(b: BreakpointsOutcome): string {
  if (b.lines.length === 0) return `${b.file}: breakpoints cleared`;
  if (!b.results)
    return `${b.file}: breakpoints at line${b.lines.length > 1 ? 's' : ''} ${b.lines.join(', ')} kept; they are sent when a program is launched`;
  const parts = b.results.map((r) => {
    if (!r.verified) return `line ${r.requestedLine}: not verified${r.message ? ` (${r.message})` : ''}`;
    return r.line !== undefined && r.line !== r.requestedLine
      ? `line ${r.requestedLine}: verified, moved to line ${r.line}`
      : `line ${r.requestedLine}: verified`;
  });
  return `${b.file}:\n  ${parts.join('\n  ')}`;
}

export function formatFrames(threadId: number, frames: FrameView[], total: number | undefined, paths: Paths): string {
  const rows = frames.map(
    (f, i) =>
      `  #${i} frame_id ${f.id}  ${f.name}  ${f.file ? `${paths.displayPath(f.file)}:${f.line ?? '?'}` : '(no source)'}`,
  );
  const more =
    total !== undefined && total > frames.length ? `\n  … ${total - frames.length} more frames not shown` : '';
  return `thread ${threadId}, ${frames.length} frame${frames.length === 1 ? '' : 's'}:\n${rows.join('\n')}${more}`;
}

export function formatVariables(reference: number, vars: VariableView[], total: number): string {
  const rows = vars.map(
    (v) => `  ${v.name}${v.type ? `: ${v.type}` : ''} = ${v.value}${v.reference ? `  (reference ${v.reference})` : ''}`,
  );
  const more =
    total > vars.length ? `\n  … ${total - vars.length} more not shown (at most ${vars.length} per call)` : '';
  return `reference ${reference}: ${total} variable${total === 1 ? '' : 's'}\n${rows.join('\n')}${more}`;
}
