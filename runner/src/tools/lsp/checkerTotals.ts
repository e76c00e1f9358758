/**
 * A project checker's totals, counted from its whole output before any of it is cut: a model
 * reading a cut listing must still tell 30 errors from 3,000.
 */

export type Severity = 'error' | 'warning' | 'note';

/** How one checker writes a finding: a line pattern with `file` and (unless fixed) `sev` groups. */
export interface FindingFormat {
  pattern: RegExp;
  /** For checkers that print no severity (go vet: every report is a problem). */
  severity?: Severity;
}

export interface CheckerTotals {
  errors: number;
  warnings: number;
  notes: number;
  files: number;
  /** Files with the most findings, most first. */
  busiest: { file: string; count: number }[];
}

export const FINDING_FORMATS = {
  pyright: { pattern: /^\s+(?<file>.+?):\d+:\d+ - (?<sev>error|warning|information):/ },
  tsc: { pattern: /^(?<file>.+?)\(\d+,\d+\): (?<sev>error|warning) TS\d+:/ },
  goVet: { pattern: /^(?:vet: )?(?<file>[^\s:]+\.go):\d+(?::\d+)?: /, severity: 'error' },
  compiler: { pattern: /^(?<file>[^\s:]+):\d+:\d+: (?<sev>fatal error|error|warning|note)(?:\[\w+\])?:/ },
  dart: { pattern: /^\s*(?<sev>error|warning|info) - (?<file>[^\s:]+):\d+:\d+ - / },
} satisfies Record<string, FindingFormat>;

function severityOf(word: string | undefined, fixed: Severity | undefined): Severity {
  if (fixed) return fixed;
  if (word === 'error' || word === 'fatal error') return 'error';
  if (word === 'warning') return 'warning';
  return 'note';
}

const BUSIEST = 5;

export function countFindings(output: string, format: FindingFormat): CheckerTotals {
  const totals = { error: 0, warning: 0, note: 0 };
  const perFile = new Map<string, number>();
  for (const line of output.split('\n')) {
    const m = format.pattern.exec(line);
    if (!m?.groups) continue;
    totals[severityOf(m.groups.sev, format.severity)]++;
    const file = m.groups.file.trim();
    perFile.set(file, (perFile.get(file) ?? 0) + 1);
  }
  const busiest = [...perFile]
    .map(([file, count]) => ({ file, count }))
    .sort((a, b) => b.count - a.count || a.file.localeCompare(b.file))
    .slice(0, BUSIEST);
  return { errors: totals.error, warnings: totals.warning, notes: totals.note, files: perFile.size, busiest };
}

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;

/**
 * The line that leads a checker's result. A failing checker whose output holds no finding in
 * its known format says so rather than claiming zero.
 */
export function totalsLine(t: CheckerTotals, exitCode: number | null, cut: boolean): string {
  const found = t.errors + t.warnings + t.notes;
  if (found === 0 && exitCode !== 0)
    return 'totals: no finding recognised in the output; read it below (the exit code says it failed)';
  const parts = [plural(t.errors, 'error'), plural(t.warnings, 'warning')];
  if (t.notes > 0) parts.push(plural(t.notes, 'note'));
  let line = `totals: ${parts.join(', ')}${found > 0 ? ` in ${plural(t.files, 'file')}` : ''}`;
  if (cut && t.busiest.length > 0) line += `\nmost in: ${t.busiest.map((b) => `${b.file} (${b.count})`).join(', ')}`;
  return line;
}
