import type { JsonSchema } from '../../../../protocol/src/tools';

export const MAX_FRAMES = 30;
export const MAX_VARIABLES = 50;
export const MAX_VALUE_CHARS = 400;
export const MAX_WAIT_SECONDS = 300;

export const DEBUG_OPS = [
  'adapters',
  'status',
  'breakpoints',
  'launch',
  'attach',
  'continue',
  'pause',
  'step_over',
  'step_in',
  'step_out',
  'threads',
  'stack',
  'scopes',
  'variables',
  'evaluate',
  'output',
  'terminate',
] as const;
export type DebugOp = (typeof DEBUG_OPS)[number];

export interface DebugArgs {
  op: DebugOp;
  file?: string;
  lines?: number[];
  program?: string;
  args?: string[];
  adapter?: 'dart' | 'debugpy' | 'lldb' | 'delve';
  port?: number;
  thread_id?: number;
  frame_id?: number;
  reference?: number;
  expression?: string;
  wait_seconds?: number;
}

/** The arguments each op needs; checked at the gateway's edge and again here. */
export const REQUIRED_BY_OP: Partial<Record<DebugOp, (keyof DebugArgs)[]>> = {
  breakpoints: ['file', 'lines'],
  launch: ['program'],
  attach: ['port'],
  scopes: ['frame_id'],
  variables: ['reference'],
  evaluate: ['expression'],
};

const id = (description: string) => ({ type: 'integer', minimum: 0, maximum: 2 ** 53 - 1, description });

export const debugSchema: JsonSchema = {
  type: 'object',
  properties: {
    op: { enum: [...DEBUG_OPS], description: 'What to do; see the tool description for each op.' },
    file: { type: 'string', minLength: 1, maxLength: 4096, description: 'breakpoints: workspace-relative source file.' },
    lines: {
      type: 'array',
      items: { type: 'integer', minimum: 1, maximum: 10_000_000 },
      maxItems: 500,
      description: "breakpoints: 1-based line numbers; the file's full set (replaces earlier ones). Empty clears the file's breakpoints.",
    },
    program: { type: 'string', minLength: 1, maxLength: 4096, description: 'launch: workspace-relative program (.py file, .go file or package directory, ELF executable).' },
    args: { type: 'array', items: { type: 'string', maxLength: 10_000 }, maxItems: 200, description: "launch: the program's command-line arguments." },
    adapter: { enum: ['dart', 'debugpy', 'lldb', 'delve'], description: 'launch/attach: use this adapter instead of picking one from the program and root markers.' },
    port: { type: 'integer', minimum: 1, maximum: 65535, description: 'attach: the port the debuggee (debugpy --listen, headless dlv, gdb-remote) listens on inside the sandbox.' },
    thread_id: id('continue/pause/steps/stack: the thread; default the thread of the last stop.'),
    frame_id: id('scopes/evaluate: a frame id from the current stop\'s "stack" result.'),
    reference: { type: 'integer', minimum: 1, maximum: 2 ** 53 - 1, description: 'variables: a reference from "scopes", "variables" or "evaluate" of the current stop.' },
    expression: { type: 'string', minLength: 1, maxLength: 10_000, description: "evaluate: an expression in the program's language." },
    wait_seconds: {
      type: 'number',
      exclusiveMinimum: 0,
      maximum: MAX_WAIT_SECONDS,
      description: 'launch/attach/continue/steps/pause: how long to block for a stop before answering "still running".',
    },
  },
  required: ['op'],
  additionalProperties: false,
  allOf: Object.entries(REQUIRED_BY_OP).map(([op, required]) => ({ if: { properties: { op: { const: op } }, required: ['op'] }, then: { required } })),
};

export const DEBUG_DESCRIPTION = `Drive a real debugger (Debug Adapter Protocol) over one program of this workspace: one session per conversation, ended after 30 minutes.
Ops: adapters (which debuggers can run here, and why not) · status · breakpoints {file, lines[]} (set before or after launch; [] clears) · launch {program, args?, adapter?} · attach {port, adapter?} · continue / pause / step_over / step_in / step_out {thread_id?} · threads · stack {thread_id?} (≤${MAX_FRAMES} frames) · scopes {frame_id} · variables {reference} (≤${MAX_VARIABLES}, values cut at ${MAX_VALUE_CHARS} chars) · evaluate {expression, frame_id?} · output (the program's stdout/stderr) · terminate.
launch, attach, continue and the steps block until the program stops or exits (up to wait_seconds) and say where it stopped. Frame ids and references are valid only for the stop they came from.`;
