import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { RunContext } from '../../../runner/src/run';
import { renameSymbol } from '../../../runner/src/tools/lsp/rename';
import { DEFAULT_LSP_SETTINGS, LspSession } from '../../../runner/src/tools/lsp/session';
import type { ServerSpec } from '../../../runner/src/tools/lsp/servers';
import { FAKE_SERVER } from './fakeServerSpec';
import type { ToolContext } from '../../../runner/src/tool';

const FAKE: ServerSpec = FAKE_SERVER;

function setup() {
  const root = realpathSync(mkdtempSync(path.join(os.tmpdir(), 'lsp-rename-')));
  writeFileSync(path.join(root, 'fake.json'), '{}');
  writeFileSync(path.join(root, 'a.fake'), 'name here\n');
  writeFileSync(path.join(root, 'b.fake'), 'name there\n');
  process.env.PATH = `${path.dirname(process.execPath)}${path.delimiter}${process.env.PATH}`;
  const run = new RunContext({
    runId: 'r',
    conversationId: 'c',
    workspace: root,
    features: { lsp: true } as never,
    settings: {},
  });
  const session = new LspSession(run.workspace, DEFAULT_LSP_SETTINGS, [FAKE]);
  const ctx = { signal: new AbortController().signal, progress: () => undefined } as unknown as ToolContext;
  return { root, run, session, ctx };
}

test('the rename is applied to every file', async () => {
  const { root, run, session, ctx } = setup();
  const r = await renameSymbol(run, session, { file: 'a.fake', line: 1, symbol: 'name', new_name: 'word' }, ctx);
  assert.match(
    r.content[0].type === 'text' ? r.content[0].text : '',
    /renamed "name" to "word": 2 edit\(s\) in 2 file\(s\)\na\.fake: 1 edit\(s\)\nb\.fake: 1 edit\(s\)/,
  );
  assert.equal(readFileSync(path.join(root, 'a.fake'), 'utf8'), 'word here\n');
  assert.equal(readFileSync(path.join(root, 'b.fake'), 'utf8'), 'word there\n');
  await session.supervisor.stopAll();
});

test('or to none: a file that changed since the server saw it refuses the whole rename', async () => {
  const { root, run, session, ctx } = setup();
  // The server sees b.fake as it is now; then it changes on disk behind the server's back.
  await session.sync(path.join(root, 'b.fake'));
  writeFileSync(path.join(root, 'b.fake'), 'changed elsewhere\n');
  await assert.rejects(
    renameSymbol(run, session, { file: 'a.fake', line: 1, symbol: 'name', new_name: 'word' }, ctx),
    /nothing was written: 1 file\(s\) changed since the edit was computed: b\.fake/,
  );
  assert.equal(readFileSync(path.join(root, 'a.fake'), 'utf8'), 'name here\n');
  assert.equal(readFileSync(path.join(root, 'b.fake'), 'utf8'), 'changed elsewhere\n');
  await session.supervisor.stopAll();
});
