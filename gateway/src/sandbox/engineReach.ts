import type Docker from 'dockerode';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * The engine itself went away (stopped, restarting, its socket gone), as opposed to an answer
 * it gave. With the engine's live-restore its containers go on meanwhile: a run is not over
 * because its engine is.
 */
export function engineUnreachable(err: unknown): boolean {
  const e = err as { statusCode?: number; code?: string; message?: string } | undefined;
  if (!e || e.statusCode !== undefined) return false;
  if (['ECONNREFUSED', 'ENOENT', 'ECONNRESET', 'EPIPE', 'ECONNABORTED'].includes(e.code ?? '')) return true;
  return /socket hang up|connect E[A-Z]+/.test(e.message ?? '');
}

const FIRST_WAIT_MS = 100;
const LONGEST_WAIT_MS = 2000;

/**
 * Resolves once the engine answers a ping again (at once if it does now), or with false when
 * the signal ends the wait first.
 */
export async function untilEngineAnswers(docker: Docker, signal: AbortSignal): Promise<boolean> {
  for (let wait = FIRST_WAIT_MS; !signal.aborted; wait = Math.min(wait * 2, LONGEST_WAIT_MS)) {
    const answers = await docker.ping().then(
      () => true,
      () => false,
    );
    if (answers) return true;
    await sleep(wait, undefined, { signal }).catch(() => undefined);
  }
  return false;
}
