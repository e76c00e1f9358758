import type { QuestionCard, QuestionOutcome } from '../../protocol/src/calls';
import type { CallerSurface, ContentItem, JsonSchema, Tier, ToolResult } from '../../protocol/src/tools';
import type { CallCancellation } from './util/cancellation';

/** What a tool implementation can reach while it runs one call. */
export interface ToolContext {
  callId: string;
  surface: CallerSurface;
  /** Aborted when the client cancels, the deadline passes or the run stops. */
  readonly signal: AbortSignal;
  /**
   * The same cancellation without making `signal`, where the caller has it: how the registry
   * watches every call. Absent, the registry watches `signal`.
   */
  cancellation?: Pick<CallCancellation, 'aborted' | 'reason' | 'onAbort'>;
  /** Streams a chunk of text to the client while the call is still running. */
  progress(text: string): void;
  /** Shows a card to the human on this call's stream. */
  ask(card: QuestionCard): Promise<QuestionOutcome>;
  /** Re-enters the gateway's registry as this call's caller (surface, approvals, wrappers apply). */
  callTool(name: string, args: unknown): Promise<ToolResult>;
}

// biome-ignore lint/suspicious/noExplicitAny: a registry holds tools of every argument type; each validates its own at the edge
export interface ToolDefinition<A = any> {
  name: string;
  description: string;
  tier: Tier;
  inputSchema: JsonSchema;
  parallelSafe: boolean;
  run(args: A, ctx: ToolContext): Promise<ToolResult>;
}

/** A failure the model can act on: becomes an `is_error` result, never a transport error. */
export class ToolError extends Error {
  constructor(
    message: string,
    readonly structured?: unknown,
  ) {
    super(message);
    this.name = 'ToolError';
  }
}

export function text(t: string): ContentItem {
  return { type: 'text', text: t };
}

export function ok(t: string, structured?: unknown): ToolResult {
  return structured === undefined ? { content: [text(t)] } : { content: [text(t)], structured };
}

export function fail(message: string, structured?: unknown): ToolResult {
  return { content: [text(message)], isError: true, structured };
}
