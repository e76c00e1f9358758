import * as path from 'node:path';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Approval, RunState } from '@tether/contract';
import { resultText } from '@tether/client';
import { readEgressLog } from '../../../gateway/src/egress/log';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { buildNpmTemplate } from './npmTemplate';
import { NPM_PACKAGE, NPM_PACKAGE_VALUE, NPM_VERSION, startStandInRegistry, type StandInRegistry } from './standInNpm';

/**
 * `!npm install` in eval, through the egress proxy, from a run of a template that adds npm,
 * against a stand-in npm registry on loopback reached as `registry.allowed.test` (on the
 * run's list) and `registry.refused.test` (not on it). Nothing leaves this machine.
 */
const TEMPLATE = 'npm';
const ALLOWED = 'registry.allowed.test';
const REFUSED = 'registry.refused.test';
let registry: StandInRegistry;
let t: TestGateway;
let runId = '';

before(async () => {
  registry = await startStandInRegistry();
  const built = await buildNpmTemplate(TEMPLATE);
  console.error(`template ${built.tag}: ${built.built ? `built in ${built.seconds}s` : 'already built'}`);
  t = await startTestGateway({
    provider: 'docker',
    templates: { allowed: { alice: [TEMPLATE] } },
    egress: {
      allowed: { alice: [`${ALLOWED}:${registry.port}`] },
      testHosts: { [ALLOWED]: '127.0.0.1', [REFUSED]: '127.0.0.1' },
    },
  });
});

after(async () => {
  if (runId) await t.alice.deleteRun(runId).catch(() => undefined);
  await t?.close();
  await registry?.close();
});

async function cell(code: string): Promise<{ text: string; isError: boolean; ms: number }> {
  const t0 = Date.now();
  const r = await t.alice.callTool(
    runId,
    'eval',
    { code, description: 'run a cell for the npm egress tests' },
    { deadlineMs: 180_000 },
  );
  return { text: resultText(r.result), isError: r.result.isError, ms: Date.now() - t0 };
}

test('!npm install from the allowed registry works through the proxy', async () => {
  const run = await t.alice.createRun({
    template: TEMPLATE,
    features: { eval: true },
    approvals: { exec: Approval.AUTO },
    egress: { allow: [] },
  });
  runId = run.runId;
  assert.equal(run.error, '');
  assert.equal(run.state, RunState.READY);

  const install = await cell(`!npm install --registry http://${ALLOWED}:${registry.port}/ ${NPM_PACKAGE}`);
  console.error(`npm install: ${install.ms} ms`);
  assert.equal(install.isError, false, install.text);
  assert.match(install.text, /added 1 package/, install.text);
  assert.doesNotMatch(install.text, /exit status/, install.text);
  const use = await cell(`!node -e "console.log(require('${NPM_PACKAGE}').value)"`);
  assert.match(use.text, new RegExp(NPM_PACKAGE_VALUE), use.text);
  assert.ok(registry.seen.includes(`/${NPM_PACKAGE}`), `the registry saw: ${registry.seen.join(', ')}`);
  assert.ok(registry.seen.includes(`/${NPM_PACKAGE}/-/${NPM_PACKAGE}-${NPM_VERSION}.tgz`));

  await new Promise((r) => setTimeout(r, 300));
  const log = await readEgressLog(path.join(t.config.stateDir, 'egress-log'), 'alice', runId);
  const got = log.filter((r) => r.host === ALLOWED && r.allowed);
  assert.ok(got.length >= 2, JSON.stringify(log));
});

test('!npm install from a registry not on the list fails, naming the allow-list', async () => {
  assert.ok(runId, 'needs the run of the previous test');
  const before = registry.seen.length;
  const https = await cell(`!npm install --registry https://${REFUSED}/ ${NPM_PACKAGE}`);
  console.error(`refused npm install (https): ${https.ms} ms`);
  assert.match(https.text, /\[exit status [1-9]/, https.text);
  assert.match(
    https.text,
    new RegExp(
      `tether: the egress proxy refused a request \\(${REFUSED}:443 is not on the egress allow-list of this run.*\\)\\. This run's egress allow-list: ${ALLOWED}:${registry.port}`,
    ),
    https.text,
  );
  const plain = await cell(`!npm install --registry http://${REFUSED}:${registry.port}/ ${NPM_PACKAGE}`);
  console.error(`refused npm install (http): ${plain.ms} ms`);
  assert.match(
    plain.text,
    new RegExp(
      `tether: the egress proxy refused a request \\(${REFUSED}:${registry.port} is not on the egress allow-list of this run.*\\)\\. This run's egress allow-list: ${ALLOWED}:${registry.port}`,
    ),
    plain.text,
  );
  assert.equal(registry.seen.length, before, 'nothing refused reached the registry');
});
