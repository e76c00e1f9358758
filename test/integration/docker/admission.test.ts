import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import { RunState } from '@tether/contract';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { dockerConfig, removeInstance } from './support';

// Fair admission against the engine: CreateRun goes through a per-tenant round-robin queue
// with two creates at the engine at once.
const instance = `admission-${process.pid}`;
let t: TestGateway | undefined;
after(async () => {
  await t?.close();
  await removeInstance(instance);
});

test("tenant A's burst of creates does not starve tenant B's one; a full line is refused at once", async () => {
  t = await startTestGateway({
    provider: 'docker',
    docker: dockerConfig(),
    instance,
    limits: { default: { memoryMb: 256, diskMb: 32 } } as never,
    tenancy: { default: { queuedCreates: 10 }, tenants: {}, admission: { concurrency: 2 } },
  });
  const finished: string[] = [];
  const started = Date.now();
  const a = Array.from({ length: 12 }, (_, i) =>
    t!.alice.createRun({ conversationId: `a${i}` }).then(
      (r) => (finished.push(`a${i}`), r),
      (e) => (finished.push(`a${i}!`), Promise.reject(e)),
    ),
  );
  const settledA = Promise.allSettled(a);
  // Let every one of A's creates reach the gateway first.
  await new Promise((r) => setTimeout(r, 300));
  const b = await t.bob.createRun({ conversationId: 'b' });
  finished.push('b');
  const bMs = Date.now() - started;
  const results = await settledA;
  const allMs = Date.now() - started;
  console.log(`# completion order: ${finished.join(' ')}; B done after ${bMs} ms, all after ${allMs} ms`);
  assert.equal(b.state, RunState.READY, b.error);
  const ok = results.filter((r) => r.status === 'fulfilled');
  const refused = results.filter((r) => r.status === 'rejected');
  // Two start at once and ten may wait: the twelfth … are refused at once.
  assert.equal(ok.length, 12, refused.map((r) => (r as PromiseRejectedResult).reason.details).join('; '));
  const bAt = finished.indexOf('b');
  assert.ok(bAt <= 4, `B finished after ${bAt} of A's 12 creates`);

  // A thirteenth and fourteenth waiting create: A's line holds ten, so a burst of 14 has 2 refused.
  const more = await Promise.allSettled(
    Array.from({ length: 14 }, () => t!.alice.createRun({ conversationId: 'more' })),
  );
  const moreRefused = more.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason);
  assert.equal(moreRefused.length, 2);
  for (const e of moreRefused) {
    assert.equal(e.code, status.RESOURCE_EXHAUSTED);
    assert.match(e.details, /10 CreateRuns waiting for admission, the limit \(queuedCreates\) is 10/);
    assert.equal(e.metadata.get('retry-after-ms')[0], '1000');
  }
  for (const r of await t.alice.listRuns()) await t.alice.deleteRun(r.runId);
  await t.bob.deleteRun(b.runId);
});
