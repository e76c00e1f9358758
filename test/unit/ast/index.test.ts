import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { RunContext } from '../../../runner/src/run';
import { ToolRegistry } from '../../../runner/src/registry';
import { registerAst, type AstOptions } from '../../../runner/src/tools/ast';
import { BackgroundIndexer } from '../../../runner/src/tools/ast/indexer';
import { InProcessEngine } from '../../../runner/src/tools/ast/pool';
import { registerFiles } from '../../../runner/src/tools/files';
import { NO_FEATURES, runnerContext, tempWorkspace } from '../../helpers/runner';

const put = (root: string, rel: string, content: string) => {
  mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
  writeFileSync(path.join(root, rel), content);
};

/** A run with only the ast family (and the file tools, whose writes it observes). */
function astRun(
  settings: { workers: number; cacheMB?: number },
  options: AstOptions = {},
  workspace = tempWorkspace(),
) {
  const run = new RunContext({
    runId: 'run-test',
    conversationId: 'conv-test',
    workspace,
    features: { ...NO_FEATURES, ast: true },
    settings: { ast: settings },
  });
  const registry = new ToolRegistry(run.workspace.root);
  registerFiles(registry, run);
  const family = registerAst(registry, run, options)!;
  const call = (tool: string, args: unknown) => registry.call(tool, args, runnerContext());
  const grep = async (pattern: string) => {
    const r = await call('ast_grep', { pattern, language: 'python', max_results: 1000 });
    assert.ok(!r.isError, JSON.stringify(r.content));
    return r.structured as {
      total: number;
      matches: { file: string; start_line: number; text: string }[];
      stats: { filesPrefiltered: number };
    };
  };
  return { run, workspace, family, call, grep, stop: () => run.stop() };
}

const pyFile = (i: number) =>
  `import os\n\ndef f${i}(items):\n    out = []\n    for x in items:\n        out.append(x + ${i})\n    return out\n`.repeat(
    8,
  ) + (i % 3 === 0 ? `\nraise ValueError(${i}) from None\n` : '');

test('files that arrive are indexed in the background; the next query reads and parses nothing', async () => {
  const r = astRun({ workers: 0 });
  try {
    for (let i = 0; i < 12; i++) put(r.workspace, `pkg/m${i}.py`, pyFile(i));
    await r.run.command({ family: 'workspace', command: 'filesArrived', payload: { path: 'pkg' } });
    await r.family.indexer!.idle();
    const cache = (r.family.engine as InProcessEngine).shard.cache;
    assert.equal(cache.trees, 12, 'every arrived file has its tree');
    const misses = cache.misses;
    const found = await r.grep('$X.append($Y)');
    assert.equal(found.total, 12 * 8);
    assert.equal(cache.misses, misses, 'no file was read again');
    // The summaries skip files without the pattern's words, before reading them.
    const raised = await r.grep('raise $E($$$A) from $C');
    assert.equal(raised.total, 4);
    assert.equal(raised.stats.filesPrefiltered, 8, 'files without raise are skipped');
    const none = await r.grep('isinstance($A, $B)');
    assert.equal(none.total, 0);
    assert.equal(none.stats.filesPrefiltered, 12);
  } finally {
    await r.stop();
  }
});

test('files a query parsed itself are not indexed again in the background', async () => {
  const r = astRun({ workers: 0 });
  try {
    for (let i = 0; i < 20; i++) put(r.workspace, `pkg/m${i}.py`, pyFile(i));
    // A query before the arrival notice parses all of them; the index then has nothing left to do.
    assert.equal((await r.grep('$X.append($Y)')).total, 20 * 8);
    await r.run.command({ family: 'workspace', command: 'filesArrived', payload: { path: 'pkg' } });
    await r.family.indexer!.idle();
    assert.equal(r.family.indexer!.indexed, 0);
    // A file the query skipped by its words was not parsed: that one the background does index.
    put(r.workspace, 'pkg/other.py', 'print(1)\n');
    assert.equal((await r.grep('$X.append($Y)')).total, 20 * 8);
    await r.run.command({ family: 'workspace', command: 'filesArrived', payload: { path: 'pkg' } });
    await r.family.indexer!.idle();
    assert.equal(r.family.indexer!.indexed, 1);
  } finally {
    await r.stop();
  }
});

test('an arrival path that escapes the workspace is refused', async () => {
  const r = astRun({ workers: 0 });
  try {
    await assert.rejects(r.run.command({ family: 'workspace', command: 'filesArrived', payload: { path: '../..' } }));
    await assert.rejects(r.run.command({ family: 'workspace', command: 'filesArrived', payload: { nope: 1 } }));
  } finally {
    await r.stop();
  }
});

test('a write re-indexes the file: the next query sees the new text without parsing', async () => {
  const r = astRun({ workers: 0 });
  try {
    put(r.workspace, 'a.py', 'foo(1)\n');
    await r.run.command({ family: 'workspace', command: 'filesArrived', payload: { path: '.' } });
    await r.family.indexer!.idle();
    assert.equal((await r.grep('foo($A)')).total, 1);
    const w = await r.call('write', { path: 'a.py', content: 'foo(1)\nfoo(2)\nbar(3)\n' });
    assert.ok(!w.isError, JSON.stringify(w.content));
    await r.family.indexer!.idle();
    const cache = (r.family.engine as InProcessEngine).shard.cache;
    assert.equal(cache.trees, 1);
    const misses = cache.misses;
    assert.equal((await r.grep('foo($A)')).total, 2);
    assert.equal((await r.grep('bar($A)')).total, 1);
    assert.equal(cache.misses, misses, 'the written version came from the index');
  } finally {
    await r.stop();
  }
});

test('a query issued while indexing is under way finds exactly what one without indexing finds', async () => {
  const workspace = tempWorkspace();
  for (let i = 0; i < 150; i++) put(workspace, `many/m${i}.py`, pyFile(i));
  const plain = astRun({ workers: 2 }, { indexOnArrival: false }, workspace);
  const racing = astRun({ workers: 2 }, {}, workspace);
  try {
    const expected = await plain.grep('$X.append($Y)');
    await racing.run.command({ family: 'workspace', command: 'filesArrived', payload: { path: '.' } });
    const during = await racing.grep('$X.append($Y)');
    await racing.family.indexer!.idle();
    const after = await racing.grep('$X.append($Y)');
    assert.equal(expected.total, 150 * 8);
    assert.deepEqual(during.matches, expected.matches);
    assert.deepEqual(after.matches, expected.matches);
    assert.deepEqual(await racing.grep('raise $E($$$A) from $C'), await plain.grep('raise $E($$$A) from $C'));
  } finally {
    await plain.stop();
    await racing.stop();
  }
});

test('background trees and summaries stay within the cache budget', async () => {
  const limitMB = 0.25;
  const r = astRun({ workers: 0, cacheMB: limitMB });
  try {
    for (let i = 0; i < 120; i++) put(r.workspace, `big/m${i}.py`, pyFile(i).repeat(3));
    await r.run.command({ family: 'workspace', command: 'filesArrived', payload: { path: '.' } });
    await r.family.indexer!.idle();
    const cache = (r.family.engine as InProcessEngine).shard.cache;
    const limit = limitMB * 1024 * 1024;
    assert.ok(cache.bytes <= limit, `${cache.bytes} above ${limit}`);
    assert.ok(cache.trees > 0 && cache.trees < 120, `${cache.trees} trees of 120`);
    assert.equal(cache.size, 120, 'every file keeps at least its summary');
    const found = await r.grep('$X.append($Y)');
    assert.equal(found.total, 120 * 8 * 3);
    assert.ok(cache.bytes <= limit, `${cache.bytes} above ${limit} after a query`);
    const none = await r.grep('isinstance($A, $B)');
    assert.equal(none.stats.filesPrefiltered, 120);
    assert.ok(cache.bytes <= limit);
  } finally {
    await r.stop();
  }
});

test('files that arrive while a process of the run starts are indexed once it is up', async () => {
  const r = astRun({ workers: 2 });
  try {
    for (let i = 0; i < 30; i++) put(r.workspace, `pkg/m${i}.py`, pyFile(i));
    const startup = r.run.startups.begin('some-server');
    await r.run.command({ family: 'workspace', command: 'filesArrived', payload: { path: 'pkg' } });
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(r.family.indexer!.indexed, 0, 'nothing indexed (the threads are not even started)');
    assert.ok(r.family.indexer!.isPaused);
    // Queries do not wait for the index, nor for the start.
    assert.equal((await r.grep('raise $E($$$A) from $C')).total, 10);
    startup.end('diagnostics');
    assert.ok(!r.family.indexer!.isPaused);
    await r.family.indexer!.idle();
    assert.equal(r.family.indexer!.indexed, 20, 'all but the 10 files the query parsed');
  } finally {
    await r.stop();
  }
});

test('index threads idle for a while are ended; the next arrival starts them and skips what they had done', async () => {
  const workspace = tempWorkspace();
  for (let i = 0; i < 40; i++) put(workspace, `pkg/m${i}.py`, pyFile(i));
  const engine = new InProcessEngine(64 * 1024 * 1024);
  const indexer = new BackgroundIndexer(2 * 1024 * 1024, engine, 2, 200);
  const waitFor = async (ok: () => boolean) => {
    const t0 = Date.now();
    while (!ok() && Date.now() - t0 < 10_000) await new Promise((r) => setTimeout(r, 20));
    assert.ok(ok());
  };
  try {
    indexer.indexDir(workspace);
    await indexer.idle();
    assert.equal(indexer.indexed, 40);
    assert.equal(indexer.running, 2);
    await waitFor(() => indexer.running === 0);
    // The same files arrive again: new threads, which know the versions the old ones indexed.
    put(workspace, 'pkg/m0.py', 'changed = 1\n');
    indexer.indexDir(workspace);
    assert.equal(indexer.running, 2);
    await indexer.idle();
    assert.equal(indexer.indexed, 41, 'only the changed file is indexed again');
    assert.equal(engine.shard.cache.trees, 40);
  } finally {
    await indexer.close();
  }
});
