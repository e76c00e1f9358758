import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { readImagesEnv } from '../../../gateway/src/sandbox/image';
import { containersOf, docker, until } from '../docker/support';

// This engine has no bridge network (the gateway listens on the host's), and no Ryuk.
process.env.TESTCONTAINERS_RYUK_DISABLED ??= 'true';
process.env.TESTCONTAINERS_HOST_OVERRIDE ??= 'localhost';
// What scripts/setup.sh built, as a platform's CI would pass it.
process.env.TETHER_GATEWAY_IMAGE ||= readImagesEnv().TETHER_GATEWAY_IMAGE;
process.env.TETHER_IMAGE ||= readImagesEnv().TETHER_IMAGE;

// Imported by package name, as a platform's test suite does after `npm install`.
import { RunState, Status, isTetherError } from '@tether/client';
import { TetherContainer, type StartedTetherContainer } from '@tether/client/testcontainers';

let leftover: StartedTetherContainer | undefined;
after(async () => {
  await leftover?.stop().catch(() => undefined);
});

test('the ten-line example: start, create a run, put a file, call a tool, stop', async () => {
  const tether = await new TetherContainer().start();
  leftover = tether;
  const run = await tether.client.createRun({ conversationId: 'platform-test' });
  await tether.client.putFiles(run.runId, { 'hello.txt': 'hello from a platform test\n' });
  const out = await tether.client.callTool(run.runId, 'read', { path: 'hello.txt' });
  assert.equal(out.isError, false, out.text);
  assert.match(out.text, /hello from a platform test/);
  assert.equal((await containersOf(run.runId)).length, 1, 'the run is a sibling container');
  // The gateway keeps a warm pool: its sandboxes must go with it too.
  const ofInstance = () =>
    docker.listContainers({
      all: true,
      filters: JSON.stringify({ label: [`dev.tether.instance=${tether.getInstance()}`] }),
    });
  await until('a pooled sandbox', async () =>
    (await ofInstance()).some((c) => c.Labels['dev.tether.pool']) ? true : undefined,
  );
  await tether.stop();
  leftover = undefined;
  assert.equal((await containersOf(run.runId)).length, 0, 'the run is gone after stop');
  assert.deepEqual(
    (await ofInstance()).map((c) => c.Names[0]),
    [],
    'nothing the gateway started outlives it, its warm pool included',
  );
});

test('the container deletes exactly the runs its clients created and did not delete', async () => {
  const tether = await new TetherContainer().withToken('platform-token', 'acme').start();
  leftover = tether;
  assert.match(tether.getAddress(), /^127\.0\.0\.1:\d+$/);
  assert.equal(tether.getToken(), 'platform-token');
  const other = tether.newClient();
  const kept = await tether.client.createRun({});
  const dropped = await other.createRun({});
  const gone = await other.createRun({});
  for (const r of [kept, dropped, gone]) assert.equal(r.state, RunState.READY, r.error);
  assert.equal(kept.tenant, 'acme');
  await other.deleteRun(gone.runId);

  const deleted = await tether.deleteCreatedRuns();
  assert.deepEqual(deleted.sort(), [kept.runId, dropped.runId].sort());
  for (const id of [kept.runId, dropped.runId, gone.runId]) {
    await assert.rejects(tether.client.getRun(id), (e) => isTetherError(e, Status.NOT_FOUND));
    assert.equal((await containersOf(id)).length, 0);
  }
  // A wrong token is refused with the typed error.
  const stranger = tether.newClient('not-the-token');
  await assert.rejects(
    stranger.listRuns(),
    (e) => isTetherError(e, Status.UNAUTHENTICATED) && e.codeName === 'UNAUTHENTICATED',
  );
  await tether.stop();
  leftover = undefined;
});
