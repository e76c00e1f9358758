import { StringDecoder } from 'node:string_decoder';
import type { ContentItem, ToolResult } from '../../../../protocol/src/tools';

/**
 * The kernel wire protocol: newline-delimited JSON on two pipes of their own (fd 3 runner →
 * kernel, fd 4 kernel → runner), apart from the process's stdout and stderr, so nothing a cell
 * prints can forge or corrupt a message. The bridge rides the same pipes: no port, no secret.
 */

export const KERNEL_IN_FD = 3;
export const KERNEL_OUT_FD = 4;

/** Runner → kernel. */
export type KernelCommand =
  | { t: 'exec'; cell: number; code: string }
  | { t: 'tool_result'; id: number; result: ToolResult };

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
  | { t: 'tool'; id: number; name: string; args: unknown };

/** Limits the kernel applies itself, so a runaway print never crosses the pipe whole. */
export interface KernelLimits {
  /** Characters of stdout+stderr a cell forwards before the kernel keeps only a tail. */
  streamChars: number;
  /** Characters of that tail. */
  tailChars: number;
  /** Rows and columns of a table. */
  tableRows: number;
  tableColumns: number;
  /** Characters of one table cell and of one repr. */
  cellChars: number;
  reprChars: number;
}

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
