import * as path from 'node:path';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Approval, RunState } from '@tether/contract';
import { resultText } from '@tether/client';
import { buildTemplate } from '../../../gateway/src/templates/build';
import { templateBuilder } from '../../../gateway/src/sandbox/templateEngine';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { fixture } from '../debug/helpers';

/**
 * A template declares a debug adapter in debug.d (debugpy's adapter under another name, with
 * launch defaults of its own); `debug adapters` reports it and a launch uses it.
 */
const TEMPLATE = 'python-entry';
const FIXTURE = path.resolve(__dirname, '../../../../test/fixtures/templates/python-entry');
let t: TestGateway;
let runId = '';

before(async () => {
  const base = process.env.TETHER_IMAGE;
  if (!base) throw new Error('TETHER_IMAGE is not set: run this through scripts/test.sh');
  const built = await buildTemplate({ name: TEMPLATE, dir: FIXTURE, baseImage: base, builder: templateBuilder() });
  console.error(`template ${built.tag}: ${built.built ? `built in ${built.seconds}s` : 'already built'}`);
  t = await startTestGateway({ provider: 'docker', templates: { allowed: { alice: [TEMPLATE] } } });
});

after(async () => {
  if (runId) await t.alice.deleteRun(runId).catch(() => undefined);
  await t?.close();
});

test('a debug adapter declared by the template: listed by adapters, chosen and configured by launch', async () => {
  const run = await t.alice.createRun({
    template: TEMPLATE,
    conversationId: 'conv-declared-adapter',
    features: { debug: true },
    approvals: { exec: Approval.AUTO, write: Approval.AUTO },
  });
  runId = run.runId;
  assert.equal(run.error, '');
  assert.equal(run.state, RunState.READY);
  await t.alice.putFileMap(runId, fixture('python'));
  const call = async (args: Record<string, unknown>) => {
    const r = await t.alice.callTool(runId, 'debug', args, { deadlineMs: 180_000 });
    return {
      text: resultText(r.result),
      isError: r.result.isError,
      structured: JSON.parse(r.result.structuredJson || '{}'),
    };
  };

  const rows = await call({ op: 'adapters' });
  assert.equal(rows.isError, false, rows.text);
  const byId = Object.fromEntries(rows.structured.adapters.map((a: any) => [a.id, a]));
  assert.deepEqual(Object.keys(byId).sort(), ['dart', 'debugpy', 'delve', 'lldb', 'python-entry']);
  assert.equal(byId['python-entry'].available, true, rows.text);
  assert.equal(byId['python-entry'].declaredIn, '/etc/tether/debug.d/python-entry.json');
  assert.match(
    rows.text,
    /^python-entry available — python3 -m debugpy\.adapter; root marker requirements\.txt in \.; \/usr\/bin\/python3; declared in \/etc\/tether\/debug\.d\/python-entry\.json$/m,
  );
  assert.deepEqual(rows.structured.problems, []);

  // No breakpoints: the declared launch default (stopOnEntry) is what stops it.
  const launched = await call({ op: 'launch', program: 'app.py' });
  assert.equal(launched.isError, false, launched.text);
  assert.match(launched.text, /^session dbg-1 \(python-entry\) launched/);
  assert.match(launched.text, /stopped \(entry\) at app\.py:1\b/);
  assert.equal(launched.structured.adapter, 'python-entry');
  const done = await call({ op: 'continue' });
  assert.equal(done.structured.state, 'ended', done.text);
  assert.equal(done.structured.exitCode, 0, done.text);

  // Named explicitly, the built-in one still launches (without stopping on entry).
  const builtIn = await call({ op: 'launch', program: 'app.py', adapter: 'debugpy' });
  assert.equal(builtIn.isError, false, builtIn.text);
  assert.match(builtIn.text, /^session dbg-2 \(debugpy\) launched/);
  assert.doesNotMatch(builtIn.text, /stopped \(entry\)/);
  assert.equal(builtIn.structured.state, 'ended', builtIn.text);

  const unknown = await call({ op: 'launch', program: 'app.py', adapter: 'gdb' });
  assert.equal(unknown.isError, true);
  assert.match(unknown.text, /unknown debug adapter "gdb"; this runner has: python-entry, dart, debugpy, lldb, delve/);
});
