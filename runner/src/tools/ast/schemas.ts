import { Type, type Static } from '@sinclair/typebox';
import { usableCores } from '../../util/cores';
import { StringEnum } from '../stringEnum';
import { LANGUAGE_IDS } from './languages';
import { MAX_PATTERN_CHARS } from './pattern';

export const DEFAULT_MAX_RESULTS = 50;
export const MAX_MAX_RESULTS = 1000;

export interface AstSettings {
  /** Bound of the parsed-tree cache. */
  cacheMB: number;
  /** Files above this size are skipped (and counted). */
  maxFileBytes: number;
  /** Staged edits not resolved within this time expire. */
  editTtlMinutes: number;
  /** Worker threads that parse and match (0: all in the runner's own thread). */
  workers: number;
}
export const DEFAULT_AST_SETTINGS: AstSettings = {
  cacheMB: 256,
  maxFileBytes: 2 * 1024 * 1024,
  editTtlMinutes: 30,
  // As many as the cores the run may use (its cgroup quota included): more only oversubscribe.
  workers: Math.min(4, usableCores()),
};

const pattern = Type.String({
  minLength: 1,
  maxLength: MAX_PATTERN_CHARS,
  description:
    'Code with metavariables: $NAME matches one node, $$$NAME zero or more siblings, $_ anything (not captured). A metavariable used twice must match the same code.',
});
const path = Type.String({
  minLength: 1,
  maxLength: 4096,
  description: 'File or directory to search, workspace-relative. Default: the whole workspace.',
});
const language = Type.String({
  minLength: 1,
  maxLength: 40,
  description: `Grammar id (${LANGUAGE_IDS.join(', ')}). Inferred from the extension when path is a file; without it a directory is searched file by file in each file's own language.`,
});

export const grepSchema = Type.Object(
  {
    pattern,
    path: Type.Optional(path),
    language: Type.Optional(language),
    max_results: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: MAX_MAX_RESULTS,
        description: `Most matches listed (default ${DEFAULT_MAX_RESULTS}); the result still says how many matched in all.`,
      }),
    ),
  },
  { additionalProperties: false },
);
export type GrepArgs = Static<typeof grepSchema>;

export const editSchema = Type.Object(
  {
    pattern,
    rewrite: Type.String({
      maxLength: MAX_PATTERN_CHARS,
      description:
        'What replaces each match; $NAME and $$$NAME are substituted (a $$$ run keeps its separators), multi-line text is re-indented to where it lands.',
    }),
    path: Type.Optional(path),
    language: Type.Optional(language),
  },
  { additionalProperties: false },
);
export type EditArgs = Static<typeof editSchema>;

export const resolveSchema = Type.Object(
  {
    edit_id: Type.String({
      pattern: '^edit_[0-9]+$',
      maxLength: 32,
      description: 'The id from a proposed ast_edit result, e.g. "edit_1".',
    }),
    action: StringEnum(['accept', 'discard'], {
      type: 'string',
      description: 'accept writes every file of the change (or none); discard drops it.',
    }),
  },
  { additionalProperties: false },
);
export type ResolveArgs = Static<typeof resolveSchema>;
