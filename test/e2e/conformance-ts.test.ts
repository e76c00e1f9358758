import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { envFromProcess, loadScenarios, runScenario, type Scenario } from '../helpers/conformance';
import { startTestGateway, type TestGateway } from '../helpers/gateway';

// The TypeScript client (@tether/client, as built and installed) against the shared conformance
// suite, on a live gateway with two tenants. Every scenario is one test.
describe('conformance: @tether/client', () => {
  let t: TestGateway;

  before(async () => {
    t = await startTestGateway({ provider: 'process', questions: { timeoutSeconds: 30 } });
    process.env.TETHER_ADDRESS = t.gateway.address;
    process.env.TETHER_TOKEN_A = 'token-alice';
    process.env.TETHER_TOKEN_B = 'token-bob';
  });
  after(async () => t?.close());

  for (const multiplex of [true, false]) {
    for (const scenario of loadScenarios()) {
      const shape = multiplex ? 'shared Calls stream' : 'a CallTool stream per call';
      test(`${scenario.name} (${shape})`, () => runScenario(scenario, { ...envFromProcess(), multiplex }));
    }
  }

  // The runner itself: a wrong expectation, an unexpected status and an unexpected card fail
  // the scenario, naming the step; its runs are deleted all the same.
  test('the runner fails a scenario that the gateway does not bear out', async () => {
    const env = envFromProcess();
    const wrong = (steps: unknown[]): Scenario => ({
      name: 'wrong',
      steps: [
        { op: 'createRun', as: 'run', request: { features: { questions: { enabled: true, targetSpace: 's' } } } },
        ...steps,
      ] as Scenario['steps'],
    });
    await assert.rejects(
      runScenario(
        wrong([
          { op: 'callTool', run: '$run', tool: 'read', arguments: { path: 'missing.txt' }, expect: { isError: false } },
        ]),
        env,
      ),
      /^Error: step 2 \(callTool\): isError is true, expected false/,
    );
    await assert.rejects(
      runScenario(wrong([{ op: 'getRun', run: 'no-such-run' }]), env),
      /step 2 \(getRun\): failed with NOT_FOUND/,
    );
    await assert.rejects(
      runScenario(wrong([{ op: 'getRun', run: '$run', expect: { status: 'NOT_FOUND' } }]), env),
      /succeeded, expected NOT_FOUND/,
    );
    await assert.rejects(
      runScenario(
        wrong([{ op: 'callTool', run: '$run', tool: 'ask_user', arguments: { question: 'Ok?' }, answers: [] }]),
        env,
      ),
      /an unexpected question card 1/,
    );
    await assert.rejects(runScenario(wrong([{ op: 'getRun', run: '$unbound' }]), env), /\$unbound is not bound/);
    assert.deepEqual(
      (await t.alice.listRuns()).map((r) => r.runId),
      [],
      'every run the scenarios created was deleted',
    );
  });
});
