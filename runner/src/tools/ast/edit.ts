import type { RunContext } from '../../run';
import { ToolError, type ToolDefinition } from '../../tool';
import type { SearchEngine } from './pool';
import type { Replacement } from './rewrite';
import { editSchema, type AstSettings, type EditArgs } from './schemas';
import { describeStats, searchWorkspace } from './search';
import { cut } from './shard';
import type { StagedEdits, StagedFile } from './staging';
import { count } from './words';

const PREVIEW_LINES = 80;

function previewOf(rel: string, reps: Replacement[]): string[] {
  const lines = [`--- ${rel} (${count(reps.length, 'replacement')})`];
  for (const r of reps) {
    lines.push(`@@ line ${r.line}`);
    for (const l of cut(r.before, 600).split('\n')) lines.push(`- ${l}`);
    for (const l of cut(r.after, 600).split('\n')) lines.push(`+ ${l}`);
  }
  return lines;
}

export function editTool(
  run: RunContext,
  engine: SearchEngine,
  staged: StagedEdits,
  settings: AstSettings,
): ToolDefinition<EditArgs> {
  return {
    name: 'ast_edit',
    description:
      'Structural rewrite, staged: every match of pattern is replaced by rewrite ($NAME / $$$NAME substituted, multi-line text re-indented). Nothing is written; the result shows the change and an edit_id for resolve (accept writes all files or none).',
    tier: 'write',
    inputSchema: editSchema,
    parallelSafe: false,
    async run(args, ctx) {
      if (typeof args.rewrite !== 'string') throw new ToolError('rewrite must be a string');
      const found = await searchWorkspace(
        run.workspace,
        engine,
        { ...args, limit: 0 },
        settings.maxFileBytes,
        ctx.signal,
      );
      const stats = found.stats;
      const files: StagedFile[] = [];
      const preview: string[] = [];
      for (const f of found.files) {
        if (!f.edit) continue;
        files.push({
          abs: f.abs,
          rel: f.rel,
          expected: f.edit.expected,
          next: f.edit.next,
          replacements: f.edit.applied.length,
        });
        preview.push(...previewOf(f.rel, f.edit.applied));
      }
      if (files.length === 0) {
        return {
          content: [
            {
              type: 'text',
              text: `no replacements: the pattern matched nothing that the rewrite changes (${describeStats(stats)})`,
            },
          ],
          structured: { replacements: 0, files: 0, stats },
        };
      }
      const edit = staged.stage(files);
      const total = files.reduce((n, f) => n + f.replacements, 0);
      const shown =
        preview.length > PREVIEW_LINES
          ? [...preview.slice(0, PREVIEW_LINES), `… ${preview.length - PREVIEW_LINES} more preview line(s)`]
          : preview;
      const text = [
        `(proposed) ${count(total, 'replacement')} in ${count(files.length, 'file')} — nothing written yet`,
        ...shown,
        `call resolve with edit_id "${edit.id}" and action "accept" to write ${files.length === 1 ? 'the file' : `all ${files.length} files`} (or none, if any changed meanwhile), or "discard"`,
      ].join('\n');
      return {
        content: [{ type: 'text', text }],
        structured: {
          edit_id: edit.id,
          replacements: total,
          files: files.map((f) => ({ path: f.rel, replacements: f.replacements })),
          stats,
        },
      };
    },
  };
}
