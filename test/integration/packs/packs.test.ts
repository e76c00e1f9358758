import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Approval, RunState } from '@tether/contract';
import { resultText } from '@tether/client';
import { buildTemplate } from '../../../gateway/src/templates/build';
import { templateBuilder } from '../../../gateway/src/sandbox/templateEngine';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { packChecks, packSample, testedPacks } from './expectations';

/**
 * Every language pack, built into one template on the runner image (npm packages installed on
 * this host, Debian packages in the build), each answering the checks of its own expect.json on
 * its own sample project: definitions and references across files, diagnostics on write (and
 * not reported again when they only move), rename, as the real servers give them.
 */
const TEMPLATE = 'packs';
const PACKS = testedPacks();
let t: TestGateway;
let runId = '';

before(async () => {
  const base = process.env.TETHER_IMAGE;
  if (!base) throw new Error('TETHER_IMAGE is not set: run this through scripts/test.sh');
  const built = await buildTemplate({ name: TEMPLATE, packs: PACKS, baseImage: base, builder: templateBuilder() });
  console.error(
    `template ${built.tag} (${PACKS.join(', ')}): ${built.built ? `built in ${built.seconds}s` : 'already built'}`,
  );
  t = await startTestGateway({ provider: 'docker', templates: { allowed: { alice: [TEMPLATE] } } });
  const run = await t.alice.createRun({
    template: TEMPLATE,
    // debug needs a conversation: its sessions are the conversation's.
    conversationId: 'packs',
    // eval: a pack's checks may build its sample first (cargo build for lldb).
    features: { lsp: true, debug: true, eval: true },
    approvals: { write: Approval.AUTO, exec: Approval.AUTO },
  });
  assert.equal(run.state, RunState.READY, run.error);
  runId = run.runId;
  for (const pack of PACKS) await t.alice.putFileMap(runId, packSample(pack));
});

after(async () => {
  if (runId) await t.alice.deleteRun(runId).catch(() => undefined);
  await t?.close();
});

const call = async (tool: string, args: Record<string, unknown>) => {
  const r = await t.alice.callTool(runId, tool, args, { deadlineMs: 120_000 });
  return { text: resultText(r.result), isError: r.result.isError };
};

test('every pack is in the template: its server is declared and found', async () => {
  if (!process.env.TETHER_TEST_PACKS) assert.ok(PACKS.length >= 8, `packs: ${PACKS.join(', ')}`);
  const st = await call('lsp', { action: 'status' });
  for (const pack of PACKS)
    assert.match(
      st.text,
      new RegExp(`binary: /usr/local/bin/\\S+; declared in /etc/tether/languages\\.d/${pack}\\.json$`, 'm'),
    );
  assert.doesNotMatch(st.text, /languages\.d.*(not readable|is declared twice)/);
});

for (const pack of PACKS) {
  test(`pack ${pack}: its server answers the sample project's checks`, async () => {
    for (const check of packChecks(pack)) {
      const r = await call(check.tool, check.args);
      const what = `${check.tool} ${JSON.stringify(check.args)}`;
      assert.equal(r.isError, false, `${what} failed: ${r.text}`);
      if (check.match) assert.match(r.text, new RegExp(check.match, 'm'), what);
      if (check.absent) assert.doesNotMatch(r.text, new RegExp(check.absent, 'm'), what);
    }
  });
}
