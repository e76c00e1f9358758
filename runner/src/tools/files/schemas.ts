import { Type, type Static } from '@sinclair/typebox';

export const MAX_READ_BYTES = 256 * 1024;
export const MAX_READ_LINES = 2000;
export const MAX_WRITE_BYTES = 10 * 1024 * 1024;

export const readSchema = Type.Object(
  {
    path: Type.String({ minLength: 1, maxLength: 4096, description: 'Workspace-relative path of a text file.' }),
    start_line: Type.Optional(Type.Integer({ minimum: 1, description: 'First line to return (1-based). Default 1.' })),
    end_line: Type.Optional(
      Type.Integer({
        minimum: 1,
        description: `Last line to return (inclusive). At most ${MAX_READ_LINES} lines are returned per call.`,
      }),
    ),
  },
  { additionalProperties: false },
);
export type ReadArgs = Static<typeof readSchema>;

export const writeSchema = Type.Object(
  {
    path: Type.String({
      minLength: 1,
      maxLength: 4096,
      description: 'Workspace-relative path; parent folders are created.',
    }),
    content: Type.String({ maxLength: MAX_WRITE_BYTES, description: 'The whole new content of the file.' }),
  },
  { additionalProperties: false },
);
export type WriteArgs = Static<typeof writeSchema>;

export const editSchema = Type.Object(
  {
    path: Type.String({ minLength: 1, maxLength: 4096 }),
    old_string: Type.String({
      minLength: 1,
      maxLength: MAX_WRITE_BYTES,
      description: 'Exact text to replace; must occur exactly once unless replace_all.',
    }),
    new_string: Type.String({ maxLength: MAX_WRITE_BYTES, description: 'Replacement text.' }),
    replace_all: Type.Optional(
      Type.Boolean({ description: 'Replace every occurrence instead of requiring exactly one.' }),
    ),
  },
  { additionalProperties: false },
);
export type EditArgs = Static<typeof editSchema>;

export const applyPatchSchema = Type.Object(
  {
    patch: Type.String({
      minLength: 1,
      maxLength: MAX_WRITE_BYTES,
      description:
        'A "*** Begin Patch" … "*** End Patch" envelope with Add/Update/Delete File sections. All files change or none.',
    }),
  },
  { additionalProperties: false },
);
export type ApplyPatchArgs = Static<typeof applyPatchSchema>;
