import type { ToolRegistry } from '../../registry';
import type { RunContext } from '../../run';
import { editTool } from './edit';
import { grepTool } from './grep';
import { resolveTool } from './resolve';
import { DEFAULT_AST_SETTINGS } from './schemas';
import { StagedEdits } from './staging';
import { InProcessEngine, WorkerPoolEngine, type SearchEngine } from './pool';

/** ast_grep, ast_edit and resolve exist when the run has tree-sitter parsers (feature `ast`). */
export function registerAst(registry: ToolRegistry, run: RunContext): void {
  if (!run.features.ast) return;
  const settings = run.settingsFor('ast', DEFAULT_AST_SETTINGS);
  const cacheBytes = settings.cacheMB * 1024 * 1024;
  const engine: SearchEngine = settings.workers > 0 ? new WorkerPoolEngine(settings.workers, cacheBytes) : new InProcessEngine(cacheBytes);
  const staged = new StagedEdits(settings.editTtlMinutes * 60_000);
  // Any tool that writes files tells the cache, so a search right after an edit sees it.
  run.observeWrites({
    async afterWrite(paths) {
      paths.forEach((p) => engine.invalidate(p));
      return [];
    },
  });
  run.onStop(() => engine.close());
  registry.register(grepTool(run, engine, settings));
  registry.register(editTool(run, engine, staged, settings));
  registry.register(resolveTool(run, staged));
}
