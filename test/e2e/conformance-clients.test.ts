import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import * as path from 'node:path';
import { startTestGateway, type TestGateway } from '../helpers/gateway';

// The Python and Go clients (clients/python, clients/go) against a live gateway with two
// tenants: each lints, runs the shared conformance suite (clients/conformance/scenarios.json)
// and its own tests. scripts/clients-setup.sh installs their toolchains, cached.
const ROOT = path.resolve(__dirname, '../../..');
const run = promisify(execFile);

let t: TestGateway;
before(async () => {
  t = await startTestGateway({ provider: 'process', questions: { timeoutSeconds: 30 } });
  // Once, before either client: the venv and Go tools are built here on a fresh machine.
  await run('bash', [path.join(ROOT, 'scripts/clients-setup.sh')], {
    cwd: ROOT,
    timeout: 15 * 60_000,
    maxBuffer: 64 << 20,
  });
});
after(async () => t?.close());

// Asynchronously: the gateway under test runs on this process's event loop.
async function clientTests(lang: 'python' | 'go', env: NodeJS.ProcessEnv = {}): Promise<string> {
  const res = await run('bash', [path.join(ROOT, 'scripts/clients-test.sh'), lang], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 10 * 60_000,
    maxBuffer: 64 << 20,
    env: {
      ...process.env,
      TETHER_ADDRESS: t.gateway.address,
      TETHER_TOKEN_A: 'token-alice',
      TETHER_TOKEN_B: 'token-bob',
      ...env,
    },
  }).catch((err: { stdout: string; stderr: string }) =>
    assert.fail(`${lang} client tests failed:\n${err.stdout}\n${err.stderr}`),
  );
  return res.stdout;
}

test('the Python client (sync and asyncio, multiplexed and not) passes every conformance scenario and its own tests', async (t) => {
  // TETHER_CONFORMANCE_MULTIPLEX unset: the runner runs every scenario in both call modes.
  const out = await clientTests('python', { TETHER_CONFORMANCE_MULTIPLEX: undefined });
  const summary = /=+ (\d+ passed.*) in [\d.]+s/.exec(out);
  assert.ok(summary, `no pytest summary in:\n${out}`);
  t.diagnostic(`pytest: ${summary[1]}`);
  assert.doesNotMatch(out, /SKIPPED|failed/, 'nothing skipped or failed');
  for (const mode of ['sync-mux', 'sync-percall', 'async-mux', 'async-percall']) {
    assert.match(out, new RegExp(`test_conformance\\.py::test_scenario\\[.*-${mode}\\] PASSED`));
  }
});

// Both ways the Go client carries tool calls: the shared Calls stream (its default) and one
// CallTool stream per call.
for (const multiplex of ['1', '0']) {
  const mode = multiplex === '1' ? 'on one shared Calls stream' : 'with a CallTool stream per call';
  test(`the Go client passes every conformance scenario and its own tests, ${mode}`, async (t) => {
    const out = await clientTests('go', { TETHER_CONFORMANCE_MULTIPLEX: multiplex });
    t.diagnostic(`go test: ${(out.match(/^\s*--- PASS/gm) ?? []).length} tests and subtests passed`);
    assert.match(out, /--- PASS: TestConformance /);
    assert.match(out, /--- PASS: TestManyConcurrentCallsOnOneClient /);
    assert.doesNotMatch(out, /--- (FAIL|SKIP)/);
    assert.match(out, /^ok\s+github\.com\/tether-dev\/tether\/clients\/go\s/m);
  });
}
