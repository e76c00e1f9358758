/**
 * Tools and their results as the gateway and the runner exchange them, and the request that
 * calls one. The gateway validates untrusted input before anything crosses this boundary, so
 * the runner trusts what it receives here.
 */
import { RequestType } from 'vscode-jsonrpc';

export type Tier = 'read' | 'write' | 'exec';

export const TIER_ORDER: Record<Tier, number> = { read: 1, write: 2, exec: 3 };

/** A JSON Schema object as handed to models. */
export type JsonSchema = Record<string, unknown>;

export interface ToolDescriptor {
  name: string;
  description: string;
  tier: Tier;
  inputSchema: JsonSchema;
  parallelSafe: boolean;
}

export type ContentItem =
  | { type: 'text'; text: string }
  /** data is base64. */
  | { type: 'image'; mime: string; data: string }
  | { type: 'table'; columns: string[]; rows: string[][]; omittedRows?: number }
  | { type: 'json'; json: unknown };

export interface ToolResult {
  content: ContentItem[];
  isError?: boolean;
  structured?: unknown;
}

/** Who made the call; bridged calls inherit it from the call that made them. */
export interface CallerSurface {
  /** The highest tier this surface may see. */
  maxTier: Tier;
}

export interface CallToolParams {
  callId: string;
  tool: string;
  arguments: Record<string, unknown>;
  surface: CallerSurface;
  /** W3C trace context of the gateway's runner span, when the gateway traces: runner-side spans may join it. */
  traceparent?: string;
}

/**
 * One timed phase of a tool call as the runner measured it (an lsp request, a debug step, a
 * cell), in ms from the moment the runner received the call: offsets, not wall-clock times,
 * so the gateway can place them under its own span without trusting the sandbox's clock.
 */
export interface RunnerPhase {
  name: string;
  startMs: number;
  durationMs: number;
  attributes?: Record<string, string | number | boolean>;
  /** Set when the phase failed: why. */
  error?: string;
}

/** What the runner answers to tools/call: the result, and its phases when the call carried a traceparent. */
export interface CallToolReply extends ToolResult {
  phases?: RunnerPhase[];
}

/**
 * gateway → runner: runs one tool. Cancelling the request (JSON-RPC `$/cancelRequest`, sent
 * by vscode-jsonrpc for a cancelled token) aborts the tool's signal in the runner.
 */
export namespace CallToolRequest {
  export const type = new RequestType<CallToolParams, CallToolReply, void>('tools/call');
}
