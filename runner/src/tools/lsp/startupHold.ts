import type { StartingProcesses } from '../../startups';
import type { LspClient } from './client';

/** What the supervisor tells the hold as the start goes on. */
export interface StartupProgress {
  /** initialize was answered: from now on an answer means the server did its start-up work. */
  initialized(): void;
  /** Initialize answered and start-up progress ended: a server asked nothing is up soon. */
  ready(): void;
}

/**
 * Holds the run's background work (the ast index) while a language server starts: from its
 * spawn until it shows it is up — its first published diagnostics, or its first answer to a
 * request after initialize (a diagnostics pull, a hover: answering took the start-up work) —
 * or until it exits. A server asked nothing counts as up `settleMs` after it is ready. The
 * run's StartingProcesses caps every hold, so a server that never answers holds nothing for good.
 */
export function holdWhileStarting(
  client: LspClient,
  startups: StartingProcesses | undefined,
  name: string,
  settleMs: number,
): StartupProgress {
  if (!startups) return { initialized: () => undefined, ready: () => undefined };
  const hold = startups.begin(name);
  client.once('diagnostics', () => hold.end('diagnostics'));
  client.once('exit', () => hold.end('exited'));
  return {
    initialized: () => client.once('answered', () => hold.end('answered')),
    ready: () =>
      setTimeout(() => {
        if (client.inFlight === 0) hold.end('settled');
      }, settleMs).unref(),
  };
}
