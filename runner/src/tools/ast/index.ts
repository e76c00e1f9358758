import type { ToolRegistry } from '../../registry';
import type { RunContext } from '../../run';
import { editTool } from './edit';
import { grepTool } from './grep';
import { BackgroundIndexer } from './indexer';
import { resolveTool } from './resolve';
import { DEFAULT_AST_SETTINGS } from './schemas';
import { StagedEdits, type PortableEdits } from './staging';
import { jsonHook } from '../../portable';
import { InProcessEngine, WorkerPoolEngine, type SearchEngine } from './pool';

/** What a run's ast family holds besides its tools (benchmarks and tests look into it). */
export interface AstFamily {
  engine: SearchEngine;
  indexer?: BackgroundIndexer;
}

export interface AstOptions {
  /** Parse arriving files in the background (default true). */
  indexOnArrival?: boolean;
}

/** ast_grep, ast_edit and resolve exist when the run has tree-sitter parsers (feature `ast`). */
export function registerAst(registry: ToolRegistry, run: RunContext, options: AstOptions = {}): AstFamily | undefined {
  if (!run.features.ast) return undefined;
  const settings = run.settingsFor('ast', DEFAULT_AST_SETTINGS);
  const cacheBytes = settings.cacheMB * 1024 * 1024;
  const engine: SearchEngine =
    settings.workers > 0 ? new WorkerPoolEngine(settings.workers, cacheBytes) : new InProcessEngine(cacheBytes);
  const indexer =
    options.indexOnArrival === false
      ? undefined
      : new BackgroundIndexer(settings.maxFileBytes, engine, settings.workers);
  const staged = new StagedEdits(settings.editTtlMinutes * 60_000);
  // Staged edits outlive a pause: resolve after the resume applies them, or refuses as ever.
  run.portable.keep(
    'ast',
    jsonHook(
      'staged-edits.json',
      () => {
        const data = staged.toPortable();
        const pending = data.edits.filter((e) => e.state === 'pending' && e.files.length > 0).length;
        return { data, counts: { 'staged edits pending': pending }, notKept: [] };
      },
      (data: PortableEdits) => ({
        counts: { 'staged edits pending': staged.fromPortable(data, run.workspace.root) },
        notKept: [],
      }),
    ),
  );
  // Any tool that writes files tells the cache, so a search right after an edit sees it.
  run.observeWrites({
    async afterWrite(paths) {
      paths.forEach((p) => engine.invalidate(p));
      indexer?.indexFiles(paths);
      return [];
    },
  });
  if (indexer) {
    // A query parses what it needs itself: the background waits meanwhile, and afterwards
    // leaves alone what the query parsed.
    engine.jobs = {
      started: () => indexer.pause(),
      finished: (parsed) => {
        indexer.covered(parsed);
        indexer.resume();
      },
    };
    // A language server starting has the CPU first: the index waits until it is up.
    run.startups.observe({ hold: () => indexer.pause(), release: () => indexer.resume() });
    run.observeArrivals((abs) => indexer.indexDir(abs));
    // What the workspace held at start (a template's checkout), once the runner is up.
    setTimeout(() => indexer.indexDir(run.workspace.root), 1000).unref();
  }
  run.onStop(async () => {
    await indexer?.close();
    await engine.close();
  });
  registry.register(grepTool(run, engine, settings));
  registry.register(editTool(run, engine, staged, settings));
  registry.register(resolveTool(run, staged));
  return { engine, indexer };
}
