import { promises as fs } from 'node:fs';
import type { RunContext } from '../../run';
import { ToolError, type ToolDefinition } from '../../tool';
import type { ContentItem } from '../../../../protocol/src/tools';
import { readRegularText } from '../../workspace';
import { editSchema, writeSchema, type EditArgs, type WriteArgs } from './schemas';

export function writeTool(run: RunContext): ToolDefinition<WriteArgs> {
  return {
    name: 'write',
    description:
      'Write a whole file (atomically). Newly introduced diagnostics of the file are folded into the result.',
    tier: 'write',
    inputSchema: writeSchema,
    parallelSafe: false,
    async run(args, ctx) {
      const abs = await run.workspace.resolve(args.path);
      const existed = await fs.stat(abs).then(
        (s) => {
          if (s.isDirectory()) throw new ToolError(`${args.path} is a directory`);
          return true;
        },
        () => false,
      );
      await run.workspace.writeAtomic(args.path, args.content);
      const lines =
        args.content.length === 0 ? 0 : args.content.split('\n').length - (args.content.endsWith('\n') ? 1 : 0);
      const extra = await run.afterWrite([abs], ctx);
      return {
        content: [
          { type: 'text', text: `${existed ? 'wrote' : 'created'} ${run.workspace.relative(abs)} (${lines} lines)` },
          ...extra,
        ],
        structured: { path: run.workspace.relative(abs), created: !existed, lines },
      };
    },
  };
}

function countOccurrences(hay: string, needle: string): number[] {
  const at: number[] = [];
  for (let i = hay.indexOf(needle); i >= 0; i = hay.indexOf(needle, i + needle.length)) at.push(i);
  return at;
}

export function editTool(run: RunContext): ToolDefinition<EditArgs> {
  return {
    name: 'edit',
    description:
      'Replace an exact string in a file. Refuses when the string is missing or occurs more than once (unless replace_all). Newly introduced diagnostics are folded into the result.',
    tier: 'write',
    inputSchema: editSchema,
    parallelSafe: false,
    async run(args, ctx) {
      const abs = await run.workspace.resolve(args.path);
      const before = await readRegularText(abs, args.path);
      if (args.old_string === args.new_string)
        throw new ToolError('old_string and new_string are the same; nothing to change');
      const at = countOccurrences(before, args.old_string);
      if (at.length === 0)
        throw new ToolError(
          `old_string not found in ${args.path}; read the file and copy the text exactly (whitespace included)`,
        );
      if (at.length > 1 && !args.replace_all) {
        const lines = at.map((i) => before.slice(0, i).split('\n').length);
        throw new ToolError(
          `old_string occurs ${at.length} times in ${args.path} (lines ${lines.join(', ')}); add surrounding context to make it unique, or set replace_all`,
        );
      }
      const after = args.replace_all
        ? before.split(args.old_string).join(args.new_string)
        : before.replace(args.old_string, () => args.new_string);
      await run.workspace.writeAtomic(args.path, after);
      const extra: ContentItem[] = await run.afterWrite([abs], ctx);
      const firstLine = before.slice(0, at[0]).split('\n').length;
      return {
        content: [
          {
            type: 'text',
            text: `edited ${run.workspace.relative(abs)}: ${args.replace_all ? at.length : 1} replacement(s), first at line ${firstLine}`,
          },
          ...extra,
        ],
        structured: {
          path: run.workspace.relative(abs),
          replacements: args.replace_all ? at.length : 1,
          line: firstLine,
        },
      };
    },
  };
}
