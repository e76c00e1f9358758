/**
 * The gateway ↔ runner contract: JSON-RPC 2.0 over the runner's stdio.
 * Both sides import these types; the gateway validates untrusted input before anything
 * crosses this boundary, so the runner trusts what it receives here.
 */

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

export interface RunFeatures {
  lsp: boolean;
  ast: boolean;
  debug: boolean;
  eval: boolean;
  questions: { enabled: boolean; targetSpace: string };
  vibe: boolean;
}

export interface InitializeParams {
  runId: string;
  conversationId: string;
  /** Absolute path of the workspace as the runner sees it. */
  workspace: string;
  features: RunFeatures;
  /** Per tool family settings from the server config, keyed by family name. */
  settings: Record<string, unknown>;
}

export interface InitializeResult {
  version: string;
  tools: ToolDescriptor[];
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
}

export interface ProgressParams {
  callId: string;
  text: string;
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

export interface BridgeParams {
  callId: string;
  tool: string;
  arguments: unknown;
}

/** A runner-side event the gateway relays outside of any one call (e.g. worker roster). */
export interface RunEventParams {
  kind: string;
  payload: unknown;
}

export const Methods = {
  /** gateway → runner request. */
  initialize: 'runner/initialize',
  /** gateway → runner request. */
  callTool: 'tools/call',
  /** gateway → runner request: orderly stop of every resource. */
  shutdown: 'runner/shutdown',
  /** gateway → runner request: a family-specific command outside a tool call. */
  command: 'runner/command',
  /** runner → gateway notification. */
  progress: 'call/progress',
  /** runner → gateway request: show a card to the human of this call. */
  ask: 'call/ask',
  /** runner → gateway request: re-enter the tool registry on behalf of this call. */
  bridge: 'call/bridge',
  /** runner → gateway notification. */
  runEvent: 'run/event',
} as const;

export interface CommandParams {
  family: string;
  command: string;
  payload: unknown;
}
