import type { JsonSchema } from '../../../../protocol/src/tools';

export const MAX_READ_BYTES = 256 * 1024;
export const MAX_READ_LINES = 2000;
export const MAX_WRITE_BYTES = 10 * 1024 * 1024;

export interface ReadArgs {
  path: string;
  start_line?: number;
  end_line?: number;
}
export const readSchema: JsonSchema = {
  type: 'object',
  properties: {
    path: { type: 'string', minLength: 1, maxLength: 4096, description: 'Workspace-relative path of a text file.' },
    start_line: { type: 'integer', minimum: 1, description: 'First line to return (1-based). Default 1.' },
    end_line: { type: 'integer', minimum: 1, description: `Last line to return (inclusive). At most ${MAX_READ_LINES} lines are returned per call.` },
  },
  required: ['path'],
  additionalProperties: false,
};

export interface WriteArgs {
  path: string;
  content: string;
}
export const writeSchema: JsonSchema = {
  type: 'object',
  properties: {
    path: { type: 'string', minLength: 1, maxLength: 4096, description: 'Workspace-relative path; parent folders are created.' },
    content: { type: 'string', maxLength: MAX_WRITE_BYTES, description: 'The whole new content of the file.' },
  },
  required: ['path', 'content'],
  additionalProperties: false,
};

export interface EditArgs {
  path: string;
  old_string: string;
  new_string: string;
  replace_all?: boolean;
}
export const editSchema: JsonSchema = {
  type: 'object',
  properties: {
    path: { type: 'string', minLength: 1, maxLength: 4096 },
    old_string: { type: 'string', minLength: 1, maxLength: MAX_WRITE_BYTES, description: 'Exact text to replace; must occur exactly once unless replace_all.' },
    new_string: { type: 'string', maxLength: MAX_WRITE_BYTES, description: 'Replacement text.' },
    replace_all: { type: 'boolean', description: 'Replace every occurrence instead of requiring exactly one.' },
  },
  required: ['path', 'old_string', 'new_string'],
  additionalProperties: false,
};

export interface ApplyPatchArgs {
  patch: string;
}
export const applyPatchSchema: JsonSchema = {
  type: 'object',
  properties: {
    patch: {
      type: 'string',
      minLength: 1,
      maxLength: MAX_WRITE_BYTES,
      description: 'A "*** Begin Patch" … "*** End Patch" envelope with Add/Update/Delete File sections. All files change or none.',
    },
  },
  required: ['patch'],
  additionalProperties: false,
};
