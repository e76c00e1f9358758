import { Type, type Static } from '@sinclair/typebox';
import { StringEnum } from '../stringEnum';

export const REFERENCES_CAP = 50;
export const WORKSPACE_SYMBOLS_CAP = 100;
export const DOCUMENT_SYMBOLS_CAP = 200;

export const NAVIGATION_ACTIONS = [
  'definition',
  'type_definition',
  'implementation',
  'references',
  'hover',
  'code_actions',
] as const;
export const LSP_ACTIONS = ['diagnostics', ...NAVIGATION_ACTIONS, 'symbols', 'status', 'reload'] as const;

export type NavigationAction = (typeof NAVIGATION_ACTIONS)[number];
export type LspAction = (typeof LSP_ACTIONS)[number];

const file = Type.String({
  minLength: 1,
  maxLength: 4096,
  description: 'Workspace-relative path. For diagnostics, "*" runs the project checker.',
});
const line = Type.Integer({ minimum: 1, description: '1-based line number.' });
const symbol = Type.String({
  minLength: 1,
  maxLength: 200,
  description:
    'A substring of that line locating the symbol (never a column). Must occur once on the line, or pass occurrence.',
});
const occurrence = Type.Integer({
  minimum: 1,
  description: 'Which occurrence of symbol on the line (1-based), when it occurs more than once.',
});

export const lspSchema = Type.Object(
  {
    action: StringEnum(LSP_ACTIONS, { type: 'string' }),
    file: Type.Optional(file),
    line: Type.Optional(line),
    symbol: Type.Optional(symbol),
    occurrence: Type.Optional(occurrence),
    query: Type.Optional(
      Type.String({ minLength: 1, maxLength: 200, description: 'symbols: a workspace-wide search (instead of file).' }),
    ),
  },
  {
    additionalProperties: false,
    allOf: [
      {
        if: { properties: { action: { enum: [...NAVIGATION_ACTIONS] } } },
        then: { required: ['file', 'line', 'symbol'] },
      },
      { if: { properties: { action: { const: 'diagnostics' } } }, then: { required: ['file'] } },
    ],
  },
);
export type LspArgs = Static<typeof lspSchema>;

export const lspRenameSchema = Type.Object(
  {
    file: Type.String({ ...file, description: 'Workspace-relative path of a file where the symbol appears.' }),
    line,
    symbol,
    occurrence: Type.Optional(occurrence),
    new_name: Type.String({ minLength: 1, maxLength: 200, pattern: '^\\S+$', description: 'The new identifier.' }),
  },
  { additionalProperties: false },
);
export type LspRenameArgs = Static<typeof lspRenameSchema>;
