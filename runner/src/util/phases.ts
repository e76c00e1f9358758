import { AsyncLocalStorage } from 'node:async_hooks';
import type { CallToolReply, RunnerPhase, ToolResult } from '../../../protocol/src/tools';

type Attributes = Record<string, string | number | boolean>;

/** Phases one traced call may return: enough for any real call, bounded for a looping one. */
export const MAX_PHASES = 64;

interface PhaseLog {
  began: number;
  phases: RunnerPhase[];
}

const current = new AsyncLocalStorage<PhaseLog>();

/**
 * Runs one tool call, collecting the phases measured under it when the gateway traces it (the
 * call carried a traceparent). Untraced calls take the plain path: no store, no timing.
 */
export async function traced(traceparent: string | undefined, call: () => Promise<ToolResult>): Promise<CallToolReply> {
  if (!traceparent) return call();
  const log: PhaseLog = { began: performance.now(), phases: [] };
  const result = await current.run(log, call);
  return log.phases.length > 0 ? { ...result, phases: log.phases } : result;
}

/**
 * Times `fn` as a phase of the traced call it runs under (an lsp request, a debug step, a
 * cell); outside one, just runs it.
 */
export function phase<T>(name: string, attributes: Attributes, fn: () => Promise<T>): Promise<T> {
  const log = current.getStore();
  return log ? timed(log, name, attributes, fn) : fn();
}

async function timed<T>(log: PhaseLog, name: string, attributes: Attributes, fn: () => Promise<T>): Promise<T> {
  const start = performance.now();
  let error: string | undefined;
  try {
    return await fn();
  } catch (err) {
    error = String((err as Error)?.message ?? err).slice(0, 200);
    throw err;
  } finally {
    if (log.phases.length < MAX_PHASES)
      log.phases.push({
        name,
        startMs: start - log.began,
        durationMs: performance.now() - start,
        attributes,
        ...(error === undefined ? {} : { error }),
      });
  }
}
