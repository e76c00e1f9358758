import { execFileSync } from 'node:child_process';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { status, type ServiceError } from '@grpc/grpc-js';
import { Approval, RunState } from '@tether/contract';
import { resultText } from '@tether/client';
import { LABELS } from '../../../gateway/src/sandbox/provider';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { fixture } from '../lsp/helpers';
import { buildFortranTemplate } from './fortranTemplate';

/**
 * A template adds a language the runner image lacks (Fortran, through fortls and a
 * languages.d file), and the run's `lsp` uses it; a tenant the config does not allow the
 * template is refused before anything starts.
 */
const TEMPLATE = 'fortran';
let t: TestGateway;
let runId = '';

before(async () => {
  const built = await buildFortranTemplate(TEMPLATE);
  console.error(`template ${built.tag}: ${built.built ? `built in ${built.seconds}s` : 'already built'}`);
  t = await startTestGateway({ provider: 'docker', templates: { allowed: { alice: [TEMPLATE] } } });
});

after(async () => {
  if (runId) await t.alice.deleteRun(runId).catch(() => undefined);
  await t?.close();
});

test('a run from the template: its language server, declared in languages.d, answers lsp', async () => {
  const t0 = Date.now();
  const run = await t.alice.createRun({
    template: TEMPLATE,
    features: { lsp: true },
    approvals: { write: Approval.AUTO },
  });
  console.error(`CreateRun with template ${TEMPLATE}: ${Date.now() - t0} ms`);
  runId = run.runId;
  assert.equal(run.error, '');
  assert.equal(run.state, RunState.READY);
  assert.equal(run.template, TEMPLATE);
  await t.alice.putFileMap(runId, fixture('fortran'));
  const call = async (args: Record<string, unknown>) => {
    const r = await t.alice.callTool(runId, 'lsp', args, { deadlineMs: 120_000 });
    return { text: resultText(r.result), isError: r.result.isError };
  };
  const st = await call({ action: 'status' });
  assert.match(
    st.text,
    /^fortls \(Fortran\): can run \(starts on first use\); roots: \. \(workspace root\); binary: \/usr\/local\/bin\/fortls; declared in \/etc\/tether\/languages\.d\/fortran\.json$/m,
  );
  const def = await call({ action: 'definition', file: 'app/main.f90', line: 4, symbol: 'circle_area' });
  assert.equal(def.isError, false, def.text);
  assert.match(def.text, /src\/shapes\.f90:5: +function circle_area\(r\) result\(a\)/);
  const ps = await call({ action: 'status' });
  assert.match(ps.text, /^fortls \(Fortran\): running/m);
});

test('a tenant the config does not allow the template is refused with the allowed names, and nothing is created', async () => {
  await assert.rejects(t.bob.createRun({ template: TEMPLATE, features: { lsp: true } }), (err: ServiceError) => {
    assert.equal(err.code, status.INVALID_ARGUMENT);
    assert.match(err.details, /template "fortran" is not available to this tenant; allowed templates: base$/);
    return true;
  });
  await assert.rejects(t.alice.createRun({ template: 'no-such-template' }), (err: ServiceError) => {
    assert.equal(err.code, status.INVALID_ARGUMENT);
    assert.match(err.details, /allowed templates: base, fortran$/);
    return true;
  });
  assert.deepEqual(await t.bob.listRuns(), []);
  const containers = execFileSync(
    'docker',
    [
      'ps',
      '-aq',
      '--filter',
      `label=${LABELS.instance}=${t.config.instance}`,
      '--filter',
      `label=${LABELS.tenant}=bob`,
    ],
    { encoding: 'utf8' },
  ).trim();
  assert.equal(containers, '');
});
