import type { Diagnostic } from 'vscode-languageserver-protocol';
import { severityName } from './format';

/**
 * Which diagnostics this run has already told the agent about, per file, keyed by
 * (severity, code, message). Position is left out on purpose: a diagnostic that merely moved
 * down a few lines is the same problem and is not reported again. A key that disappears from
 * the file's diagnostics is forgotten, so a problem fixed and later re-introduced is news again.
 */
export class DiagnosticsLedger {
  private readonly reported = new Map<string, Set<string>>();

  static key(d: Diagnostic): string {
    return JSON.stringify([severityName(d.severity), d.code ?? null, d.message]);
  }

  /** Records the file's current diagnostics; returns those not reported before (one per key). */
  admit(file: string, current: Diagnostic[]): Diagnostic[] {
    const before = this.reported.get(file) ?? new Set<string>();
    const now = new Set<string>();
    const fresh: Diagnostic[] = [];
    for (const d of current) {
      const k = DiagnosticsLedger.key(d);
      if (!before.has(k) && !now.has(k)) fresh.push(d);
      now.add(k);
    }
    this.reported.set(file, now);
    return fresh;
  }

  /** What has been reported, per file, as a pause writes it. */
  toPortable(): Record<string, string[]> {
    return Object.fromEntries([...this.reported].map(([file, keys]) => [file, [...keys]]));
  }

  /** Takes back what toPortable gave; returns the number of files. */
  fromPortable(saved: Record<string, string[]>): number {
    for (const [file, keys] of Object.entries(saved)) this.reported.set(file, new Set(keys));
    return Object.keys(saved).length;
  }

  /** Marks diagnostics as known without reporting them (e.g. shown by an explicit `lsp diagnostics`). */
  note(file: string, current: Diagnostic[]): void {
    this.admit(file, current);
  }
}
