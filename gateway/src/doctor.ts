import type { Check, CheckStatus } from './checks';
import type { GatewayConfig } from './config';
import { providerChecks } from './sandbox/doctors';

export type { Check, CheckStatus } from './checks';

/** Checks what a gateway needs before it can create runs, and says what to do when it can't. */
export async function diagnose(config: GatewayConfig, opts: { notes?: Check[] } = {}): Promise<Check[]> {
  return [...(opts.notes ?? []), ...(await providerChecks(config))];
}

export function formatReport(checks: Check[]): string {
  const mark: Record<CheckStatus, string> = { ok: 'ok  ', warn: 'warn', fail: 'FAIL' };
  const lines = checks.map(
    (c) => `${mark[c.status]}  ${c.name.padEnd(13)} ${c.detail}${c.fix ? `\n      ${' '.repeat(13)} → ${c.fix}` : ''}`,
  );
  const failed = checks.filter((c) => c.status === 'fail').length;
  lines.push(
    failed
      ? `\n${failed} problem(s): the gateway cannot create runs until they are fixed.`
      : '\nready: the gateway can create runs.',
  );
  return lines.join('\n');
}
