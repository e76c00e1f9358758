import type { QuestionCard, QuestionOutcome } from '../../../protocol/src/calls';
import type { ToolResult } from '../../../protocol/src/tools';

/**
 * What an approval prompt came to. `card` is how the card was answered, for the call's report;
 * absent when no card could be shown at all.
 */
export type PermissionOutcome =
  | { kind: 'approved' }
  | { kind: 'denied'; reason: string; card?: 'denied' | 'skipped' | 'timeout' | 'unavailable' };

/**
 * One call as its tools and its approval prompt see it, whatever carries it: the tools never
 * learn which stream, or which wire, that is.
 */
export interface CallPort {
  /** Aborted by cancel, disconnect or deadline; its reason says which. */
  readonly signal: AbortSignal;
  /** Whether a human answers this call's cards. */
  readonly acceptsQuestions: boolean;
  /** Whether the client runs tools the run does not own. */
  readonly acceptsBridgeCalls: boolean;
  progress(text: string): void;
  /** An ASK card; unavailable when no human is connected to the call. */
  ask(card: QuestionCard): Promise<QuestionOutcome>;
  /** A PERMISSION card; with no human connected it is denied (fail-closed). */
  askPermission(question: string, context: string): Promise<PermissionOutcome>;
  /** Hands a tool the run does not own to the client, and waits for its result. */
  bridgeToClient(tool: string, argsJson: string): Promise<ToolResult>;
  /**
   * Runs a bridged call as work of this call: a tool may return while one is still under way,
   * and the call's signal must still be able to stop it once the result went out.
   */
  during<T>(work: () => Promise<T>): Promise<T>;
}
