import type { JsonSchema } from '../../../../protocol/src/tools';

export const REFERENCES_CAP = 50;
export const WORKSPACE_SYMBOLS_CAP = 100;
export const DOCUMENT_SYMBOLS_CAP = 200;

export const NAVIGATION_ACTIONS = ['definition', 'type_definition', 'implementation', 'references', 'hover', 'code_actions'] as const;
export const LSP_ACTIONS = ['diagnostics', ...NAVIGATION_ACTIONS, 'symbols', 'status', 'reload'] as const;

export type NavigationAction = (typeof NAVIGATION_ACTIONS)[number];
export type LspAction = (typeof LSP_ACTIONS)[number];

export interface LspArgs {
  action: LspAction;
  file?: string;
  line?: number;
  symbol?: string;
  occurrence?: number;
  query?: string;
}

export interface LspRenameArgs {
  file: string;
  line: number;
  symbol: string;
  occurrence?: number;
  new_name: string;
}

const file = { type: 'string', minLength: 1, maxLength: 4096, description: 'Workspace-relative path. For diagnostics, "*" runs the project checker.' };
const line = { type: 'integer', minimum: 1, description: '1-based line number.' };
const symbol = {
  type: 'string',
  minLength: 1,
  maxLength: 200,
  description: 'A substring of that line locating the symbol (never a column). Must occur once on the line, or pass occurrence.',
};
const occurrence = { type: 'integer', minimum: 1, description: 'Which occurrence of symbol on the line (1-based), when it occurs more than once.' };

export const lspSchema: JsonSchema = {
  type: 'object',
  properties: {
    action: { type: 'string', enum: [...LSP_ACTIONS] },
    file,
    line,
    symbol,
    occurrence,
    query: { type: 'string', minLength: 1, maxLength: 200, description: 'symbols: a workspace-wide search (instead of file).' },
  },
  required: ['action'],
  additionalProperties: false,
  allOf: [
    { if: { properties: { action: { enum: [...NAVIGATION_ACTIONS] } } }, then: { required: ['file', 'line', 'symbol'] } },
    { if: { properties: { action: { const: 'diagnostics' } } }, then: { required: ['file'] } },
  ],
};

export const lspRenameSchema: JsonSchema = {
  type: 'object',
  properties: {
    file: { ...file, description: 'Workspace-relative path of a file where the symbol appears.' },
    line,
    symbol,
    occurrence,
    new_name: { type: 'string', minLength: 1, maxLength: 200, pattern: '^\\S+$', description: 'The new identifier.' },
  },
  required: ['file', 'line', 'symbol', 'new_name'],
  additionalProperties: false,
};
