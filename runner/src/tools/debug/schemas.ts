import { Type, type Static } from '@sinclair/typebox';
import { StringEnum } from '../stringEnum';

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

const id = (description: string) => Type.Integer({ minimum: 0, maximum: 2 ** 53 - 1, description });

const debugProperties = {
  op: StringEnum(DEBUG_OPS, { description: 'What to do; see the tool description for each op.' }),
  file: Type.Optional(
    Type.String({ minLength: 1, maxLength: 4096, description: 'breakpoints: workspace-relative source file.' }),
  ),
  lines: Type.Optional(
    Type.Array(Type.Integer({ minimum: 1, maximum: 10_000_000 }), {
      maxItems: 500,
      description:
        "breakpoints: 1-based line numbers; the file's full set (replaces earlier ones). Empty clears the file's breakpoints.",
    }),
  ),
  program: Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 4096,
      description: 'launch: workspace-relative program (.py file, .go file or package directory, ELF executable).',
    }),
  ),
  args: Type.Optional(
    Type.Array(Type.String({ maxLength: 10_000 }), {
      maxItems: 200,
      description: "launch: the program's command-line arguments.",
    }),
  ),
  adapter: Type.Optional(
    Type.String({
      pattern: '^[a-z0-9][a-z0-9_.-]{0,62}$',
      description:
        'launch/attach: use this adapter (an id from op "adapters": dart, debugpy, lldb, delve, or one the template declares) instead of picking one from the program and root markers.',
    }),
  ),
  port: Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: 65535,
      description:
        'attach: the port the debuggee (debugpy --listen, headless dlv, gdb-remote) listens on inside the sandbox.',
    }),
  ),
  thread_id: Type.Optional(id('continue/pause/steps/stack: the thread; default the thread of the last stop.')),
  frame_id: Type.Optional(id('scopes/evaluate: a frame id from the current stop\'s "stack" result.')),
  reference: Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: 2 ** 53 - 1,
      description: 'variables: a reference from "scopes", "variables" or "evaluate" of the current stop.',
    }),
  ),
  expression: Type.Optional(
    Type.String({ minLength: 1, maxLength: 10_000, description: "evaluate: an expression in the program's language." }),
  ),
  wait_seconds: Type.Optional(
    Type.Number({
      exclusiveMinimum: 0,
      maximum: MAX_WAIT_SECONDS,
      description: 'launch/attach/continue/steps/pause: how long to block for a stop before answering "still running".',
    }),
  ),
};

/** The arguments each op needs; checked at the gateway's edge and again here. */
export const REQUIRED_BY_OP: Partial<Record<DebugOp, (keyof typeof debugProperties)[]>> = {
  breakpoints: ['file', 'lines'],
  launch: ['program'],
  attach: ['port'],
  scopes: ['frame_id'],
  variables: ['reference'],
  evaluate: ['expression'],
};

export const debugSchema = Type.Object(debugProperties, {
  additionalProperties: false,
  allOf: Object.entries(REQUIRED_BY_OP).map(([op, required]) => ({
    if: { properties: { op: { const: op } }, required: ['op'] },
    then: { required },
  })),
});
export type DebugArgs = Static<typeof debugSchema>;

export const DEBUG_DESCRIPTION = `Drive a real debugger (Debug Adapter Protocol) over one program of this workspace: one session per conversation, ended after 30 minutes.
Ops: adapters (which debuggers can run here, and why not) · status · breakpoints {file, lines[]} (set before or after launch; [] clears) · launch {program, args?, adapter?} · attach {port, adapter?} · continue / pause / step_over / step_in / step_out {thread_id?} · threads · stack {thread_id?} (≤${MAX_FRAMES} frames) · scopes {frame_id} · variables {reference} (≤${MAX_VARIABLES}, values cut at ${MAX_VALUE_CHARS} chars) · evaluate {expression, frame_id?} · output (the program's stdout/stderr) · terminate.
launch, attach, continue and the steps block until the program stops or exits (up to wait_seconds) and say where it stopped. Frame ids and references are valid only for the stop they came from.`;
