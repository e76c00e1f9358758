import { StringDecoder } from 'node:string_decoder';
import type { ContentItem, ToolResult } from '../../../../protocol/src/tools';
import wire from './wire.json';

/**
 * The kernel wire protocol: newline-delimited JSON on two pipes of their own (fd 3 runner →
 * kernel, fd 4 kernel → runner), apart from the process's stdout and stderr, so nothing a cell
 * prints can forge or corrupt a message. The bridge rides the same pipes: no port, no secret.
 *
 * Its names (descriptors, message kinds, fields, limits) come from wire.json, which the Python
 * driver reads too; the types below are checked against it when this file compiles.
 */

export const KERNEL_IN_FD: number = wire.fds.in;
export const KERNEL_OUT_FD: number = wire.fds.out;

/** Runner → kernel. */
export type KernelCommand =
  | { t: 'exec'; cell: number; code: string }
  | { t: 'tool_result'; id: number; result: ToolResult }
  /** Writes the user's variables to `path` (at most `limit` bytes), answered by `state` then `done`. */
  | { t: 'save_state'; cell: number; path: string; limit: number }
  /** Reads back what save_state wrote into the (fresh) namespace, answered by `state` then `done`. */
  | { t: 'load_state'; cell: number; path: string }
  /** Imports modules a load_state will need while the state is still being checked, answered by `done`. */
  | { t: 'import_modules'; cell: number; modules: string[] };

/** What a kernel says it kept (save_state) or got back (load_state). */
export interface KernelStateReport {
  serializer: string;
  /** Names of the variables written or restored. */
  variables: string[];
  /** Alias → module name, for modules kept by name and imported again. */
  modules: Record<string, string>;
  /** save_state: modules a load_state of this file will import (kept modules, the values' types', the serializer). */
  imports?: string[];
  bytes: number;
  notKept: { what: string; why: string }[];
}

/** Kernel → runner. */
export type KernelMessage =
  | { t: 'ready'; language: string; version: string; pid: number }
  /** Text the cell printed; `omitted` counts characters the kernel dropped before this tail. */
  | { t: 'stream'; cell: number; name: 'stdout' | 'stderr'; text: string; omitted?: number }
  /** A rich item from display() or the echoed last expression. */
  | { t: 'display'; cell: number; item: ContentItem }
  | { t: 'error'; cell: number; ename: string; evalue: string; traceback: string }
  | { t: 'done'; cell: number; status: 'ok' | 'error' | 'interrupted' }
  /** A bridged tool call from inside the cell; answered by a tool_result with the same id. */
  | { t: 'tool'; id: number; name: string; args: unknown }
  /** The answer to save_state or load_state. */
  | { t: 'state'; cell: number; report: KernelStateReport };

/**
 * Limits the kernel applies itself, so a runaway print never crosses the pipe whole: characters
 * of stdout+stderr before only a tail is kept, of that tail, rows and columns of a table,
 * characters of one table cell and of one repr (see wire.json).
 */
export type KernelLimits = { [K in keyof typeof wire.limits]: number };

// ---- the types above against wire.json: a name added, renamed or dropped on one side only fails the build.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type Agrees<T extends true> = T;
type FieldsOf<U extends { t: string }> = { [K in U['t']]: Exclude<keyof Extract<U, { t: K }>, 't'> };
type DeclaredFields<G> = { [K in keyof G]: keyof G[K] };
export type WireAgreesWithJson = [
  Agrees<Same<keyof typeof wire.tag, 't'>>,
  Agrees<Same<FieldsOf<KernelCommand>, DeclaredFields<typeof wire.commands>>>,
  Agrees<Same<FieldsOf<KernelMessage>, DeclaredFields<typeof wire.messages>>>,
];

/** Splits a byte stream into JSON lines; a malformed line is reported, never thrown. */
export class JsonLineDecoder {
  private readonly decoder = new StringDecoder('utf8');
  /** Pieces of a line not yet ended: kept apart so a large message is joined once, not rescanned. */
  private pieces: string[] = [];

  constructor(
    private readonly onMessage: (msg: unknown) => void,
    private readonly onGarbage: (line: string) => void,
  ) {}

  push(chunk: Buffer): void {
    let text = this.decoder.write(chunk);
    let nl = text.indexOf('\n');
    while (nl !== -1) {
      this.pieces.push(text.slice(0, nl));
      this.line(this.pieces.join(''));
      this.pieces = [];
      text = text.slice(nl + 1);
      nl = text.indexOf('\n');
    }
    if (text) this.pieces.push(text);
  }

  private line(line: string): void {
    if (!line.trim()) return;
    let msg: unknown;
    try {
      msg = JSON.parse(line);
    } catch {
      this.onGarbage(line);
      return;
    }
    this.onMessage(msg);
  }
}
