/**
 * What the runner sends the gateway while one tool call runs: progress, questions for the
 * human and bridged tool calls. Each names the call by the callId of its CallToolParams.
 * Cancellation needs nothing here: the gateway cancels the `tools/call` request itself.
 */
import { NotificationType, RequestType } from 'vscode-jsonrpc';
import type { ToolResult } from './tools';

export interface ProgressParams {
  callId: string;
  text: string;
}

/** runner → gateway: a chunk of text streamed to the client while the call runs. */
export namespace ProgressNotification {
  export const type = new NotificationType<ProgressParams>('call/progress');
}

export interface QuestionOption {
  label: string;
  description?: string;
}

export interface QuestionCard {
  question: string;
  context?: string;
  options: QuestionOption[];
  allowFreeText: boolean;
  multiSelect: boolean;
  /** Seconds to wait for the human; the gateway applies its default when absent. */
  timeoutSeconds?: number;
}

export type QuestionOutcome =
  | { kind: 'answered'; selected: number[]; freeText?: string }
  | { kind: 'skipped' }
  | { kind: 'timeout' }
  | { kind: 'unavailable'; reason: string };

export interface AskParams {
  callId: string;
  card: QuestionCard;
}

/** runner → gateway: shows a card to the human of this call and waits for the outcome. */
export namespace AskRequest {
  export const type = new RequestType<AskParams, QuestionOutcome, void>('call/ask');
}

export interface BridgeParams {
  callId: string;
  tool: string;
  arguments: unknown;
}

/** runner → gateway: re-enters the tool registry on behalf of this call (surface, approvals apply). */
export namespace BridgeRequest {
  export const type = new RequestType<BridgeParams, ToolResult, void>('call/bridge');
}
