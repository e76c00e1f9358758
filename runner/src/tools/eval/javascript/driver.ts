/**
 * The JavaScript kernel: a Node process of its own (the runner's Node) whose global scope is
 * the notebook's. Started as `node driver.js <limits-json>`; fd 3 carries commands in and fd 4
 * messages out (see ../wire.ts). Cells run as scripts in this process's main context, so every
 * Node global is there and objects keep one realm.
 */
import * as net from 'node:net';
import * as path from 'node:path';
import * as util from 'node:util';
import * as vm from 'node:vm';
import { Console } from 'node:console';
import { Writable } from 'node:stream';
import { createRequire } from 'node:module';
import {
  JsonLineDecoder,
  KERNEL_IN_FD,
  KERNEL_OUT_FD,
  type KernelCommand,
  type KernelLimits,
  type KernelMessage,
} from '../wire';
import type { ContentItem, ToolResult } from '../../../../../protocol/src/tools';
import { CellSyntaxError, prepareCell } from './cellSource';
import { loadGlobals, saveGlobals } from './state';

const limits = JSON.parse(process.argv[2] ?? '{}') as KernelLimits;
const wireOut = new net.Socket({ fd: KERNEL_OUT_FD, readable: false, writable: true });
const wireIn = new net.Socket({ fd: KERNEL_IN_FD, readable: true, writable: false });

function send(msg: KernelMessage): void {
  wireOut.write(`${JSON.stringify(msg)}\n`);
}

let cell = 0;
let running = false;

/** console output of a cell: onto the wire, capped per cell with only a tail kept past the cap. */
class CellStream extends Writable {
  private sent = 0;
  private omitted = 0;
  private tail = '';

  constructor(private readonly streamName: 'stdout' | 'stderr') {
    super({ decodeStrings: false });
  }

  override _write(chunk: Buffer | string, _enc: BufferEncoding, done: () => void): void {
    this.add(typeof chunk === 'string' ? chunk : chunk.toString('utf8'));
    done();
  }

  add(text: string): void {
    const room = limits.streamChars - this.sent;
    if (room > 0) {
      const head = text.slice(0, room);
      this.sent += head.length;
      send({ t: 'stream', cell, name: this.streamName, text: head });
      text = text.slice(room);
    }
    if (text) {
      this.omitted += text.length;
      this.tail = (this.tail + text.slice(-limits.tailChars)).slice(-limits.tailChars);
    }
  }

  finish(): void {
    if (this.omitted)
      send({ t: 'stream', cell, name: this.streamName, text: this.tail, omitted: this.omitted - this.tail.length });
    this.sent = this.omitted = 0;
    this.tail = '';
  }
}

const stdout = new CellStream('stdout');
const stderr = new CellStream('stderr');

function clip(s: string, n: number): string {
  return s.length <= n ? s : `${s.slice(0, n)}… (${s.length} chars)`;
}

function isRecordArray(x: unknown): x is Record<string, unknown>[] {
  return (
    Array.isArray(x) &&
    x.length > 0 &&
    x.every(
      (r) => r !== null && typeof r === 'object' && !Array.isArray(r) && Object.getPrototypeOf(r) === Object.prototype,
    )
  );
}

function cellText(v: unknown): string {
  return clip(typeof v === 'string' ? v : util.inspect(v, { depth: 1, breakLength: Infinity }), limits.cellChars);
}

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/**
 * PNG bytes are an image; an array of plain objects is a table (as console.table shows it);
 * anything else its inspection.
 */
function render(value: unknown): ContentItem {
  if (
    value instanceof Uint8Array &&
    value.byteLength >= 8 &&
    Buffer.from(value.buffer, value.byteOffset, 8).equals(PNG_SIGNATURE)
  ) {
    return {
      type: 'image',
      mime: 'image/png',
      data: Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64'),
    };
  }
  if (isRecordArray(value)) {
    const columns = [...new Set(value.slice(0, limits.tableRows).flatMap((r) => Object.keys(r)))].slice(
      0,
      limits.tableColumns,
    );
    const rows = value
      .slice(0, limits.tableRows)
      .map((r, i) => [String(i), ...columns.map((c) => (c in r ? cellText(r[c]) : ''))]);
    const item: ContentItem = { type: 'table', columns: ['', ...columns], rows };
    if (value.length > limits.tableRows) item.omittedRows = value.length - limits.tableRows;
    return item;
  }
  return {
    type: 'text',
    text: clip(
      typeof value === 'string' ? util.inspect(value) : util.inspect(value, { depth: 4, colors: false }),
      limits.reprChars,
    ),
  };
}

function display(...values: unknown[]): void {
  for (const v of values) send({ t: 'display', cell, item: render(v) });
}

class ToolError extends Error {
  constructor(
    message: string,
    readonly result: ToolResult,
  ) {
    super(message);
    this.name = 'ToolError';
  }
}

/** What `await tool(...)` gives: the result's text (also its string form) and the rest of it. */
class ToolReply {
  constructor(
    readonly text: string,
    readonly structured: unknown,
    readonly content: ContentItem[],
  ) {}

  toString(): string {
    return this.text;
  }
}

const pendingTools = new Map<number, (r: ToolResult) => void>();
let nextToolId = 0;

/** Calls one of this run's tools; the same approvals and limits apply as to the model's calls. */
function tool(name: string, args: unknown = {}): Promise<ToolReply> {
  const id = ++nextToolId;
  return new Promise((resolve, reject) => {
    pendingTools.set(id, (result) => {
      const text = result.content
        .map((c) => (c.type === 'text' ? c.text : ''))
        .filter(Boolean)
        .join('\n');
      if (result.isError) reject(new ToolError(text, result));
      else resolve(new ToolReply(text, result.structured, result.content));
    });
    send({ t: 'tool', id, name, args });
  });
}

function formatError(err: unknown): { ename: string; evalue: string; traceback: string } {
  if (err instanceof CellSyntaxError) {
    return {
      ename: 'SyntaxError',
      evalue: err.message,
      traceback: `SyntaxError: ${err.message} (cell line ${err.line})`,
    };
  }
  if (!(err instanceof Error) && !(err && typeof err === 'object' && 'stack' in err)) {
    return { ename: 'Uncaught', evalue: util.inspect(err), traceback: `Uncaught ${util.inspect(err)}` };
  }
  const e = err as Error;
  const frames = String(e.stack ?? '')
    .split('\n')
    .filter((l) => /^\s+at /.test(l))
    .filter((l) => !/\(node:|\bat node:/.test(l) && !l.includes(__filename))
    .map((l) => l.replace(/\(?cell-(\d+)\.js:(\d+):(\d+)\)?/g, 'cell line $2:$3'))
    .slice(0, 12);
  return {
    ename: e.name ?? 'Error',
    evalue: e.message ?? '',
    traceback: [`${e.name}: ${e.message}`, ...frames].join('\n'),
  };
}

/** Settles when a SIGINT arrives while the cell awaits something (sync code is stopped by breakOnSigint). */
let interruptWaiting: ((err: Error) => void) | undefined;
process.on('SIGINT', () => {
  if (running && interruptWaiting)
    interruptWaiting(Object.assign(new Error('the cell was interrupted'), { name: 'Interrupted' }));
});

async function runCell(id: number, code: string): Promise<void> {
  cell = id;
  running = true;
  let status: 'ok' | 'error' | 'interrupted' = 'ok';
  try {
    const prepared = prepareCell(code);
    const script = new vm.Script(prepared.source, {
      filename: `cell-${id}.js`,
      importModuleDynamically: (vm.constants as unknown as { USE_MAIN_CONTEXT_DEFAULT_LOADER?: symbol } | undefined)
        ?.USE_MAIN_CONTEXT_DEFAULT_LOADER,
    } as vm.ScriptOptions);
    let value = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
    if (prepared.async) {
      const interrupted = new Promise<never>((_, reject) => (interruptWaiting = reject));
      value = ((await Promise.race([value, interrupted])) as { value?: unknown } | undefined)?.value;
    }
    if (prepared.echoes && value !== undefined) {
      (globalThis as Record<string, unknown>)._ = value;
      display(value);
    }
  } catch (err) {
    const interrupted =
      (err as Error)?.name === 'Interrupted' || (err as { code?: string })?.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED';
    status = interrupted ? 'interrupted' : 'error';
    const info = interrupted
      ? { ename: 'Interrupted', evalue: 'the cell was interrupted', traceback: 'Interrupted: the cell was interrupted' }
      : formatError(err);
    send({ t: 'error', cell: id, ...info });
  } finally {
    interruptWaiting = undefined;
    running = false;
    stdout.finish();
    stderr.finish();
    send({ t: 'done', cell: id, status });
  }
}

/** Module exports a cell required, with the id it required them by. */
const required = new Map<unknown, string>();
/** The globals before any cell ran: those are the kernel's, not the user's. */
let baseline: ReadonlySet<string> = new Set();

/** save_state or load_state, answered as a cell: a state message (or an error), then done. */
function runState(cmd: Extract<KernelCommand, { t: 'save_state' | 'load_state' }>): void {
  cell = cmd.cell;
  let status: 'ok' | 'error' = 'ok';
  try {
    const report =
      cmd.t === 'save_state'
        ? saveGlobals(cmd.path, cmd.limit, baseline, required)
        : loadGlobals(cmd.path, (globalThis as unknown as { require: (id: string) => unknown }).require);
    send({ t: 'state', cell: cmd.cell, report });
  } catch (err) {
    status = 'error';
    send({ t: 'error', cell: cmd.cell, ...formatError(err) });
  } finally {
    send({ t: 'done', cell: cmd.cell, status });
  }
}

/** Requires what a load_state will require again, ahead of it; a failure is left for it to name. */
function importAhead(id: number, modules: string[]): void {
  const require = createRequire(path.join(process.cwd(), 'cell.js'));
  for (const m of modules) {
    try {
      require(m);
    } catch {
      // load_state names it.
    }
  }
  send({ t: 'done', cell: id, status: 'ok' });
}

function installGlobals(): void {
  const g = globalThis as Record<string, unknown>;
  g.console = new Console({ stdout, stderr });
  g.display = display;
  g.tool = tool;
  g.ToolError = ToolError;
  // What a cell requires is remembered, so a pause keeps a module by its id (see state.ts).
  const base = createRequire(path.join(process.cwd(), 'cell.js'));
  g.require = Object.assign((id: string) => {
    const exports: unknown = base(id);
    if (exports !== null && (typeof exports === 'object' || typeof exports === 'function')) required.set(exports, id);
    return exports;
  }, base);
  // Background failures of earlier cells are reported, not fatal: the kernel keeps its state.
  process.on('uncaughtException', (err) => stderr.add(`Uncaught ${formatError(err).traceback}\n`));
  process.on('unhandledRejection', (err) => stderr.add(`Unhandled rejection: ${formatError(err).traceback}\n`));
}

let queue = Promise.resolve();
const decoder = new JsonLineDecoder(
  (msg) => {
    const cmd = msg as KernelCommand;
    if (cmd.t === 'tool_result') {
      const settle = pendingTools.get(cmd.id);
      pendingTools.delete(cmd.id);
      settle?.(cmd.result);
    } else if (cmd.t === 'exec') {
      queue = queue.then(() => runCell(cmd.cell, cmd.code));
    } else if (cmd.t === 'save_state' || cmd.t === 'load_state') {
      queue = queue.then(() => runState(cmd));
    } else if (cmd.t === 'import_modules') {
      queue = queue.then(() => importAhead(cmd.cell, cmd.modules));
    }
  },
  () => undefined,
);
wireIn.on('data', (chunk: Buffer) => decoder.push(chunk));
wireIn.on('end', () => process.exit(0));

installGlobals();
baseline = new Set([...Object.getOwnPropertyNames(globalThis), '_']);
send({ t: 'ready', language: 'javascript', version: process.version, pid: process.pid });
