import { ConflictError, commitChanges } from '../../fileTransaction';
import type { RunContext } from '../../run';
import { ToolError, type ToolDefinition } from '../../tool';
import { resolveSchema, type ResolveArgs } from './schemas';
import type { StagedEdits } from './staging';
import { count } from './words';

export function resolveTool(run: RunContext, staged: StagedEdits): ToolDefinition<ResolveArgs> {
  return {
    name: 'resolve',
    description:
      'Accept or discard a change staged by ast_edit. accept checks every file against the content it had when staged: if any one changed, nothing is written; otherwise all files are written atomically (rolled back if a write fails).',
    tier: 'write',
    inputSchema: resolveSchema,
    parallelSafe: false,
    async run(args, ctx) {
      if (args.action !== 'accept' && args.action !== 'discard')
        throw new ToolError('action must be "accept" or "discard"');
      const edit = staged.pending(String(args.edit_id));
      if (args.action === 'discard') {
        const n = edit.files.length;
        staged.settle(edit, 'discarded');
        return {
          content: [{ type: 'text', text: `discarded ${edit.id} (${count(n, 'file')} untouched)` }],
          structured: { edit_id: edit.id, state: 'discarded' },
        };
      }
      const files = edit.files;
      try {
        await commitChanges(
          files.map((f) => ({ path: f.abs, expected: f.expected, next: f.next })),
          (p) => run.workspace.relative(p),
        );
      } catch (err) {
        // Changed files will never match again; a failed write may be retried.
        if (err instanceof ConflictError) staged.settle(edit, 'rejected');
        throw err;
      }
      staged.settle(edit, 'accepted');
      const extra = await run.afterWrite(
        files.map((f) => f.abs),
        ctx,
      );
      const total = files.reduce((n, f) => n + f.replacements, 0);
      return {
        content: [
          {
            type: 'text',
            text: `accepted ${edit.id}: wrote ${count(total, 'replacement')} in ${count(files.length, 'file')}: ${files.map((f) => f.rel).join(', ')}`,
          },
          ...extra,
        ],
        structured: { edit_id: edit.id, state: 'accepted', files: files.map((f) => f.rel), replacements: total },
      };
    },
  };
}
