/**
 * What every client's driver does in bench/clients.ts, in one place: the contenders, in the
 * order each round times them, and the calls they make. The Python and Go drivers
 * (driver.py, go/main.go) repeat these few literals; bench/clients.ts checks that each
 * driver reported exactly these contenders.
 */
export const CONTENDERS = ['health', 'readCalls', 'readCallTool', 'hoverCalls', 'hoverCallTool'] as const;
export type Samples = Record<(typeof CONTENDERS)[number], number[]>;

export const READ = { path: 'bench.txt' };
/** A hover in the TypeScript fixture (test/fixtures/lsp/ts). */
export const HOVER = { action: 'hover', file: 'src/main.ts', line: 3, symbol: 'Circle' };
