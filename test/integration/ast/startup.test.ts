import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { RunContext } from '../../../runner/src/run';
import { ToolRegistry } from '../../../runner/src/registry';
import { registerAst } from '../../../runner/src/tools/ast';
import { registerLsp } from '../../../runner/src/tools/lsp';
import { NO_FEATURES, runnerContext, tempWorkspace } from '../../helpers/runner';

/**
 * A language server starting while the background index runs: the runner's lsp and ast
 * families as the runner wires them, real pyright (the npm devDependency, the version the
 * runner image ships) and real index threads. No Docker: what is watched is inside the runner.
 */
const REPO = path.resolve(__dirname, '../../../..');
const FILES = 2000;
const WORKERS = 2;

const pyModule = (i: number) =>
  `import os\n\n\nclass Thing${i}:\n    def __init__(self, items):\n        self.items = list(items)\n\n` +
  `    def total(self):\n        out = 0\n        for x in self.items:\n            if isinstance(x, int):\n                out += x\n        return out\n\n`.repeat(
    6,
  );

test('a starting language server pauses the background index until its first diagnostics; then it resumes', async () => {
  const workspace = tempWorkspace();
  writeFileSync(path.join(workspace, 'pyproject.toml'), '[project]\nname = "startup"\n');
  writeFileSync(path.join(workspace, 'main.py'), 'count: int = "many"\n');
  mkdirSync(path.join(workspace, 'pkg'));
  for (let i = 0; i < FILES; i++) writeFileSync(path.join(workspace, 'pkg', `m${i}.py`), pyModule(i));
  mkdirSync(path.join(workspace, 'other'));
  for (let i = 0; i < 10; i++) writeFileSync(path.join(workspace, 'other', `o${i}.py`), pyModule(i));
  // pyright-langserver from node_modules/.bin, as the runner image has it on its PATH.
  process.env.PATH = `${path.join(REPO, 'node_modules/.bin')}${path.delimiter}${process.env.PATH}`;

  const run = new RunContext({
    runId: 'run-test',
    conversationId: 'conv-test',
    workspace,
    features: { ...NO_FEATURES, lsp: true, ast: true },
    settings: { ast: { workers: WORKERS } },
  });
  const registry = new ToolRegistry(run.workspace.root);
  registerLsp(registry, run);
  const ast = registerAst(registry, run)!;
  const indexer = ast.indexer!;
  const call = (tool: string, args: unknown) => registry.call(tool, args, runnerContext());
  // What the index had done when the start began and when it ended.
  const seen: { at: string; indexed: number; paused: boolean }[] = [];
  run.startups.observe({
    hold: () => seen.push({ at: 'hold', indexed: indexer.indexed, paused: indexer.isPaused }),
    release: () => seen.push({ at: 'release', indexed: indexer.indexed, paused: indexer.isPaused }),
  });
  try {
    await run.command({ family: 'workspace', command: 'filesArrived', payload: { path: 'pkg' } });
    const t0 = Date.now();
    while (indexer.indexed < 20 && Date.now() - t0 < 60_000) await new Promise((r) => setTimeout(r, 10));
    assert.ok(indexer.indexed >= 20, 'the index is under way');

    const diagnostics = call('lsp', { action: 'diagnostics', file: 'main.py' });
    // A query while pyright starts is answered in full: queries never wait for the index.
    while (run.startups.holding.length === 0 && Date.now() - t0 < 60_000) await new Promise((r) => setTimeout(r, 5));
    const during = await call('ast_grep', { pattern: 'isinstance($A, int)', path: 'other', language: 'python' });
    assert.ok(!during.isError, JSON.stringify(during.content));
    assert.equal((during.structured as { total: number }).total, 10 * 6);

    const result = await diagnostics;
    assert.ok(!result.isError, JSON.stringify(result.content));
    assert.match(JSON.stringify(result.content), /reportAssignmentType/);

    const [hold] = run.startups.history;
    assert.equal(hold.name, 'pyright');
    // pyright answers diagnostics when asked (pull) once it registered that, else publishes them.
    assert.ok(
      hold.how === 'answered' || hold.how === 'diagnostics',
      `the hold ended when pyright gave its first answer, not ${hold.how}`,
    );
    const begun = seen.find((s) => s.at === 'hold')!;
    const ended = seen.find((s) => s.at === 'release')!;
    assert.ok(begun.paused && !ended.paused);
    assert.ok(begun.indexed < FILES, `the index was still under way when pyright started (${begun.indexed} files)`);
    // Each thread finishes the file in hand (2 files in all on a quiet machine); the bound
    // leaves room for threads that see the pause late on a loaded one (8 seen in a full
    // suite), and far below the 2000 files the index has to go through.
    assert.ok(
      ended.indexed - begun.indexed <= 8 * WORKERS,
      `indexed while pyright started (${hold.ended! - hold.began} ms): ${ended.indexed - begun.indexed} files`,
    );

    await indexer.idle();
    assert.ok(indexer.indexed >= FILES, `the index resumed and finished (${indexer.indexed} files)`);
  } finally {
    await run.stop();
  }
});
