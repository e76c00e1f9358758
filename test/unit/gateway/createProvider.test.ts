import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { defaultConfig } from '../../../gateway/src/config';
import { createProvider } from '../../../gateway/src/sandbox';

const config = (allowProcessProvider: boolean) => ({
  ...defaultConfig(),
  provider: 'process' as const,
  allowProcessProvider,
  stateDir: mkdtempSync(path.join(os.tmpdir(), 'tether-provider-')),
});

test('the process provider is refused unless the config allows it', async () => {
  await assert.rejects(createProvider(config(false)), /without isolation/);
});

test('the process provider declares what it cannot do: no shared state, runs not kept, no egress', async () => {
  const provider = await createProvider(config(true));
  assert.equal(provider.name, 'process');
  assert.equal(provider.capabilities.sharedState, false);
  assert.equal(provider.capabilities.keepsRunsOnShutdown, false);
  assert.equal(provider.capabilities.egress.carried, false);
  await provider.close();
});

test('the docker provider carries egress and keeps runs on shutdown as its own config says', async () => {
  for (const keepOnShutdown of [false, true]) {
    const base = defaultConfig();
    const provider = await createProvider({ ...base, provider: 'docker', docker: { ...base.docker, keepOnShutdown } });
    assert.equal(provider.capabilities.keepsRunsOnShutdown, keepOnShutdown);
    assert.equal(provider.capabilities.sharedState, false);
    assert.deepEqual(provider.capabilities.egress, { carried: true });
    await provider.close();
  }
});
