import { after, before, describe, test } from 'node:test';
import { envFromProcess, loadScenarios, runScenario } from '../helpers/conformance';
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

  for (const scenario of loadScenarios()) {
    test(scenario.name, () => runScenario(scenario, envFromProcess()));
  }
});
