import type { ToolRegistry } from '../../registry';
import type { RunContext } from '../../run';
import { editTool } from './edit';
import { grepTool } from './grep';
import { resolveTool } from './resolve';
import { DEFAULT_AST_SETTINGS } from './schemas';
import { StagedEdits } from './staging';
import { TreeCache } from './treeCache';

/** ast_grep, ast_edit and resolve exist when the run has tree-sitter parsers (feature `ast`). */
export function registerAst(registry: ToolRegistry, run: RunContext): void {
  if (!run.features.ast) return;
  const settings = run.settingsFor('ast', DEFAULT_AST_SETTINGS);
  const cache = new TreeCache(settings.cacheMB * 1024 * 1024);
  const staged = new StagedEdits(settings.editTtlMinutes * 60_000);
  // Any tool that writes files tells the cache, so a search right after an edit sees it.
  run.observeWrites({
    async afterWrite(paths) {
      paths.forEach((p) => cache.invalidate(p));
      return [];
    },
  });
  run.onStop(() => cache.clear());
  registry.register(grepTool(run, cache, settings));
  registry.register(editTool(run, cache, staged, settings));
  registry.register(resolveTool(run, staged));
}
