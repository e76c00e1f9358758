import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { RunState } from '@tether/contract';
import { resultText } from '../../../clients/typescript/src';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { dockerConfig, removeInstance } from './support';

// Load: 20 runs at once, each answering 200 concurrent `read` calls. Every answer must be the
// content of its own run's file: nothing lost, nothing crossed between runs.
const RUNS = 20;
const CALLS = 200;
let t: TestGateway;

before(async () => {
  t = await startTestGateway({
    provider: 'docker',
    docker: dockerConfig(),
    limits: { default: { memoryMb: 512, cpuMillis: 1000, pids: 256 } } as never,
  });
});
after(async () => {
  await t?.close();
  await removeInstance(t.config.instance);
});

test(`${RUNS} runs at once, each answering ${CALLS} concurrent reads`, async () => {
  const runs = await Promise.all(
    Array.from({ length: RUNS }, (_, i) => t.alice.createRun({ conversationId: `load-${i}` })),
  );
  for (const r of runs) assert.equal(r.state, RunState.READY, r.error);
  await Promise.all(runs.map((r, i) => t.alice.putFileMap(r.runId, { 'data.txt': `run ${i} ${r.runId}\n` })));

  const results = await Promise.all(
    runs.map((r, i) =>
      Promise.all(
        Array.from({ length: CALLS }, () =>
          t.alice.callTool(r.runId, 'read', { path: 'data.txt' }).then(
            (o) => ({
              ok: !o.result.isError && resultText(o.result).includes(`run ${i} ${r.runId}`),
              why: resultText(o.result),
            }),
            (e) => ({ ok: false, why: String(e.details ?? e.message) }),
          ),
        ),
      ),
    ),
  );
  const bad = results.flat().filter((x) => !x.ok);
  assert.equal(bad.length, 0, `${bad.length} of ${RUNS * CALLS} calls went wrong, e.g. ${bad[0]?.why}`);
  assert.equal(results.flat().length, RUNS * CALLS);
  for (const r of runs) assert.equal((await t.alice.getRun(r.runId)).state, RunState.READY);
  await Promise.all(runs.map((r) => t.alice.deleteRun(r.runId)));
});
