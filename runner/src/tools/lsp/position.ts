import type { Position, Range } from 'vscode-languageserver-protocol';
import { ToolError } from '../../tool';

export function splitLines(text: string): string[] {
  return text.split('\n').map((l) => (l.endsWith('\r') ? l.slice(0, -1) : l));
}

const IDENTIFIER_CHAR = /[\p{L}\p{N}_$]/u;

/**
 * Turns (1-based line, symbol substring) into an LSP position. Columns are UTF-16 code units,
 * which is what JavaScript string indices already count. The position is the first identifier
 * character inside the match (so ".push(" points at "push"), else the match's start.
 *
 * A substring occurring more than once is refused with every occurrence listed, unless
 * `occurrence` (1-based) picks one: never a silent guess.
 */
export function locateSymbol(
  text: string,
  line: number,
  symbol: string,
  occurrence?: number,
): { position: Position; range: Range; lineText: string } {
  const lines = splitLines(text);
  // A trailing newline does not start a line a model could point at.
  const count = lines.length > 1 && lines[lines.length - 1] === '' ? lines.length - 1 : lines.length;
  if (!Number.isInteger(line) || line < 1 || line > count) {
    throw new ToolError(
      `line ${line} is out of range: the file has ${count} line${count === 1 ? '' : 's'} (lines are 1-based)`,
    );
  }
  const lineText = lines[line - 1];
  const at: number[] = [];
  for (let i = lineText.indexOf(symbol); i >= 0; i = lineText.indexOf(symbol, i + 1)) at.push(i);
  if (at.length === 0) {
    throw new ToolError(
      `symbol ${JSON.stringify(symbol)} is not on line ${line}; line ${line} reads: ${JSON.stringify(lineText)}`,
    );
  }
  let start: number;
  if (occurrence !== undefined) {
    if (occurrence > at.length) {
      throw new ToolError(
        `occurrence ${occurrence} asked, but ${JSON.stringify(symbol)} occurs ${at.length} time(s) on line ${line}: ${JSON.stringify(lineText)}`,
      );
    }
    start = at[occurrence - 1];
  } else if (at.length > 1) {
    const shown = at.map(
      (c, i) => `#${i + 1} at column ${c + 1}: …${lineText.slice(Math.max(0, c - 12), c + symbol.length + 12)}…`,
    );
    throw new ToolError(
      `symbol ${JSON.stringify(symbol)} occurs ${at.length} times on line ${line} (${shown.join('; ')}); pass occurrence (1-${at.length}) or a longer, unique substring`,
    );
  } else start = at[0];
  let offset = 0;
  while (offset < symbol.length && !IDENTIFIER_CHAR.test(symbol[offset])) offset++;
  if (offset === symbol.length) offset = 0;
  const character = start + offset;
  return {
    position: { line: line - 1, character },
    range: { start: { line: line - 1, character: start }, end: { line: line - 1, character: start + symbol.length } },
    lineText,
  };
}
