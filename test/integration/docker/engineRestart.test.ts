import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { status } from '@grpc/grpc-js';
import { PauseDepth, RunState } from '@tether/contract';
import { resultText, type TetherClient } from '@tether/client';
import { LABELS } from '../../../gateway/src/sandbox/provider';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { canRestartEngine, docker, dockerConfig, removeInstance, startEngine, stopEngine, until } from './support';

// The engine stopped and started again under live, paused and pooled runs, as an engine upgrade
// does. With the engine's live-restore its containers go on; a run is reached over its socket,
// which needs no engine, so calls answer through the outage.

/** On a size-limited workspace volume: the filesystem image behind its loop device. */
const DISK_IMAGE_LABEL = 'dev.tether.disk-image';
const skip = canRestartEngine() ? false : 'stopping the engine needs root';
const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tether-engine-'));
const gateways: { t: TestGateway; instance: string }[] = [];

after(async () => {
  if (skip) return;
  await startEngine(); // whatever happened above, the next file gets an engine
  const left: string[] = [];
  for (const { t, instance } of gateways) {
    await t.close();
    if ((await removeInstance(instance, { quiet: true })).length) left.push(instance);
  }
  // The volumes of containers that lived through the restart are still counted as mounted by
  // the engine (moby/moby#44422, docs/containers.md) until it starts again: once more, then gone.
  if (left.length === 0) return;
  await stopEngine();
  await startEngine();
  for (const instance of left) await removeInstance(instance);
});

async function gatewayUnder(runtime: string): Promise<{ t: TestGateway; instance: string }> {
  const instance = `engine-${runtime}-${process.pid}`;
  const t = await startTestGateway({
    provider: 'docker',
    docker: { ...dockerConfig(), runtime },
    instance,
    stateDir: path.join(stateDir, runtime),
    runs: { idlePauseSeconds: 0 },
    pool: { size: 1, maxTotal: 2, maxMemoryMb: 4096, concurrency: 1, templates: {} },
  });
  gateways.push({ t, instance });
  return { t, instance };
}

const registered = async (runtime: string) =>
  Object.keys(((await docker.info()) as { Runtimes?: Record<string, unknown> }).Runtimes ?? {}).includes(runtime);

async function evalIn(c: TetherClient, runId: string, code: string): Promise<string> {
  const out = await c.callTool(runId, 'eval', { code, description: 'a cell of the engine tests' });
  assert.equal(out.result.isError, false, resultText(out.result));
  return resultText(out.result);
}

/** A container's host name is its id: the container a run is in, whether pooled or not. */
const HOSTNAME = 'import socket\nsocket.gethostname()';
const hostOf = (text: string) => /([0-9a-f]{12})/.exec(text)![1];

const pooled = async (instance: string) =>
  (
    await docker.listContainers({
      filters: JSON.stringify({ label: [`${LABELS.instance}=${instance}`, LABELS.pool], status: ['running'] }),
    })
  ).length;

for (const runtime of ['runc', 'runsc'])
  test(`an engine restart under ${runtime}: a live run answers through it with its kernel, a paused run resumes, the pool serves`, {
    skip,
  }, async (ctx) => {
    if (!(await registered(runtime))) return ctx.skip(`the engine has no ${runtime} runtime registered`);
    const { t, instance } = await gatewayUnder(runtime);
    const live = await t.alice.createRun({ conversationId: 'engine-live', features: { eval: true } });
    assert.equal(live.state, RunState.READY, live.error);
    assert.match(await evalIn(t.alice, live.runId, 'x = 41\nx'), /41/);
    const paused = await t.alice.createRun({ conversationId: 'engine-paused', features: { eval: true } });
    assert.match(await evalIn(t.alice, paused.runId, 'y = 7\ny'), /7/);
    const first = await t.alice.pauseRun(paused.runId);
    assert.equal(first.state, RunState.PAUSED, first.error);
    const memoryPauses = first.pause?.depth === PauseDepth.MEMORY;
    const doomed = await t.alice.createRun({ conversationId: 'engine-doomed', features: { eval: true } });
    const doomedBox = hostOf(await evalIn(t.alice, doomed.runId, HOSTNAME));
    await until('a warm sandbox in the pool', () => pooled(instance), 60_000, 250);

    await stopEngine();
    try {
      // The live run is reached over its socket: no engine in the way.
      assert.match(await evalIn(t.alice, live.runId, 'x + 1'), /42/);
      assert.equal((await t.alice.getRun(live.runId)).state, RunState.READY);
      // What needs the engine says so plainly: a later try may succeed.
      const cold = await t.alice
        .createRun({ conversationId: 'engine-cold', features: { eval: true }, limits: { memoryMb: 768 } })
        .catch((e: { code: number; details: string }) => e);
      if ('code' in cold) {
        assert.equal(cold.code, status.UNAVAILABLE, cold.details);
        assert.match(cold.details, /engine/i);
      } else assert.match(cold.error, /engine/i, `a create without the engine: ${JSON.stringify(cold)}`);
    } finally {
      await startEngine();
    }

    // Back: the same run, the same kernel; its end is watched again.
    assert.match(await evalIn(t.alice, live.runId, 'x + 2'), /43/);
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal((await t.alice.getRun(live.runId)).state, RunState.READY);
    assert.match(await evalIn(t.alice, paused.runId, 'y * 6'), /42/);
    // A container that ends after the restart is seen to end: its wait was made again.
    await docker.getContainer(doomedBox).kill();
    // (The lost connection fails it first; the container's exit then gives the reason.)
    await until(
      "the killed run's end seen",
      async () => /the run's sandbox ended: the container was killed/.test((await t.alice.getRun(doomed.runId)).error),
      15_000,
      200,
    );
    const next = await t.alice.createRun({ conversationId: 'engine-next', features: { eval: true } });
    assert.equal(next.state, RunState.READY, next.error);
    assert.match(await evalIn(t.alice, next.runId, '6 * 7'), /42/);

    // A run that lived through the restart pauses and resumes on its volume (whose mounts the
    // engine may have lost count of), and once deleted leaves no disk behind.
    const second = await t.alice.pauseRun(live.runId);
    assert.equal(second.state, RunState.PAUSED, second.error);
    // The engine's checkpoint API refuses a container it restarted under: said, not tried.
    if (memoryPauses) {
      assert.equal(second.pause?.depth, PauseDepth.PORTABLE);
      assert.match(
        second.pause?.notKept.join('\n') ?? '',
        /no memory checkpoint \(the engine restarted under its container/,
      );
    }
    assert.match(await evalIn(t.alice, live.runId, 'x + 3'), /44/);
    const host = hostOf(await evalIn(t.alice, live.runId, HOSTNAME));
    const volume = (await docker.getContainer(host).inspect()).Mounts.find((m) => m.Destination === '/workspace')!
      .Name!;
    const image = (await docker.getVolume(volume).inspect()).Labels?.[DISK_IMAGE_LABEL];
    assert.ok(image && existsSync(image), `the workspace's disk image: ${image}`);
    await t.alice.deleteRun(live.runId);
    await until(
      'the run and its disk gone',
      async () =>
        !existsSync(image) &&
        !readFileSync('/proc/mounts', 'utf8').includes(`/${volume}/`) &&
        (await docker
          .getContainer(host)
          .inspect()
          .then(
            () => false,
            (e: { statusCode?: number }) => e.statusCode === 404,
          )),
      30_000,
      250,
    );
  });
