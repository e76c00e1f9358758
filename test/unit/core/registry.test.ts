import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ToolRegistry } from '../../../runner/src/registry';
import { ToolError, ok, type ToolContext } from '../../../runner/src/tool';
import { RunContext } from '../../../runner/src/run';
import { registerTools } from '../../../runner/src/tools';
import { runnerContext, tempWorkspace } from '../../helpers/runner';

const ctx: ToolContext = runnerContext();

test('a tool is listed with its tier, schema and parallel safety', () => {
  const r = new ToolRegistry();
  r.register({
    name: 'echo',
    description: 'd',
    tier: 'read',
    inputSchema: { type: 'object' },
    parallelSafe: true,
    run: async () => ok('x'),
  });
  assert.deepEqual(r.list(), [
    { name: 'echo', description: 'd', tier: 'read', inputSchema: { type: 'object' }, parallelSafe: true },
  ]);
  assert.throws(() => r.register({ ...r.list()[0], run: async () => ok('y') }), /registered twice/);
});

test('a ToolError becomes an is_error result, an unknown tool too', async () => {
  const r = new ToolRegistry();
  r.register({
    name: 'bad',
    description: '',
    tier: 'read',
    inputSchema: {},
    parallelSafe: true,
    run: async () => {
      throw new ToolError('nope', { why: 1 });
    },
  });
  assert.deepEqual(await r.call('bad', {}, ctx), {
    content: [{ type: 'text', text: 'nope' }],
    isError: true,
    structured: { why: 1 },
  });
  assert.equal((await r.call('missing', {}, ctx)).isError, true);
});

test('only the file tools exist when no feature is wired', async () => {
  const run = new RunContext({
    runId: 'r',
    conversationId: '',
    workspace: tempWorkspace(),
    features: {
      lsp: false,
      ast: false,
      debug: false,
      eval: false,
      questions: { enabled: false, targetSpace: '' },
      vibe: false,
    },
    settings: {},
  });
  const r = new ToolRegistry();
  await registerTools(r, run);
  assert.deepEqual(
    r
      .list()
      .map((t) => t.name)
      .sort(),
    ['apply_patch', 'edit', 'read', 'write'],
  );
  assert.deepEqual(Object.fromEntries(r.list().map((t) => [t.name, t.tier])), {
    read: 'read',
    write: 'write',
    edit: 'write',
    apply_patch: 'write',
  });
});
