import type { ProcessRefusal } from '../../../../protocol/src/process';
import { logger } from '../../log';
import { ToolError } from '../../tool';

/** A refusal thrown inside the family and answered as it is (never reaching the connection). */
export class Refusal extends Error {
  constructor(
    readonly code: ProcessRefusal['code'],
    message: string,
  ) {
    super(message);
  }
}

/** What a command answers for whatever it threw: its refusal, a confinement refusal, or `failed`. */
export function refusalOf(err: unknown, command: string): ProcessRefusal {
  if (err instanceof Refusal) return { ok: false, code: err.code, message: err.message };
  if (err instanceof ToolError) return { ok: false, code: 'invalid', message: err.message };
  const message = err instanceof Error ? err.message : String(err);
  logger.warn({ command, err: message }, 'process command failed');
  return { ok: false, code: 'failed', message };
}
