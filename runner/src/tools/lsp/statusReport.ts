import { activeLanguages } from './languages';
import type { LspSession } from './session';
import type { ServerStatus } from './supervisor';

function seconds(ms: number): string {
  return ms < 60_000 ? `${Math.round(ms / 1000)} s` : `${Math.round(ms / 60_000)} min`;
}

/** One paragraph per known server: can it run here, and if not, which half is missing. */
export function formatStatus(session: LspSession, all: ServerStatus[]): string {
  const out: string[] = [];
  for (const s of all) {
    const roots = s.roots.length ? `roots: ${s.roots.join(', ')}` : `roots: none (markers: ${s.markers.join(', ')})`;
    const bin = s.binary ? `binary: ${session.format.display(s.binary)}` : `binary not found: ${s.command}`;
    let state: string;
    if (s.running.length) state = 'running';
    else if (s.roots.length && s.binary) state = 'can run (starts on first use)';
    else if (!s.roots.length && !s.binary) state = 'cannot run: no root marker and binary not found';
    else if (!s.roots.length) state = 'cannot run: no root marker';
    else state = 'cannot run: binary not found';
    const from = s.source ? `; declared in ${s.source}` : '';
    out.push(`${s.id} (${s.languages}): ${state}; ${roots}; ${bin}${from}`);
    for (const r of s.running) {
      out.push(
        `  running for ${r.root}: pid ${r.pid}, up ${seconds(r.uptimeMs)}${r.busy.length ? `, busy: ${r.busy.join(', ')}` : ''}`,
      );
    }
    for (const c of s.crashes) {
      const how = c.last.signal ? `killed by ${c.last.signal}` : `exit code ${c.last.code}`;
      const tail = c.last.stderrTail ? ` — ${c.last.stderrTail.split('\n').slice(-2).join(' | ').slice(0, 300)}` : '';
      out.push(
        `  last crash for ${c.root}: ${c.last.at.toISOString()} (${how}; ${c.count} crash(es) this run; restarted on next call)${tail}`,
      );
    }
  }
  for (const p of activeLanguages().problems) out.push(`language file not used: ${p}`);
  return out.join('\n');
}
