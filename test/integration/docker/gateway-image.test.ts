import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { RunState } from '@tether/contract';
import { TetherClient, resultText } from '../../../clients/typescript/src';
import { containersOf, docker, gatewayImage, removeInstance, runnerImage, until } from './support';

// The gateway image, started the way a Testcontainers user would: the engine's socket mounted,
// the gateway on the host network (the engine here has no bridge), driven over gRPC. Disk
// limits attach loop devices: the container sees the host's /dev and may use the loop
// devices (device cgroup rules), with no added capability and without --privileged.
process.env.TESTCONTAINERS_RYUK_DISABLED ??= 'true';
process.env.TESTCONTAINERS_HOST_OVERRIDE ??= 'localhost';

import { GenericContainer, Wait, type StartedTestContainer } from 'testcontainers';
import { freePort } from '../../helpers/ports';

/** Testcontainers has no builder method for device cgroup rules. */
class GatewayContainer extends GenericContainer {
  withLoopDevices(): this {
    this.hostConfig.DeviceCgroupRules = ['b 7:* rmw', 'c 10:237 rmw'];
    return this;
  }
}

let gateway: StartedTestContainer;
let client: TetherClient;
const instance = `tc-${process.pid}`;

before(async () => {
  const port = await freePort();
  gateway = await new GatewayContainer(gatewayImage())
    .withNetworkMode('host')
    .withLoopDevices()
    .withBindMounts([
      { source: '/var/run/docker.sock', target: '/var/run/docker.sock' },
      { source: '/dev', target: '/dev' },
    ])
    .withEnvironment({
      TETHER_LISTEN: `127.0.0.1:${port}`,
      TETHER_HTTP_LISTEN: 'off',
      TETHER_TOKENS: 'tc-token=acme',
      TETHER_IMAGE: runnerImage(),
      TETHER_INSTANCE: instance,
      // Runs start cold, so each run's container carries its id (a pooled one carries its pool id).
      TETHER_POOL_SIZE: '0',
    })
    .withLabels({ 'dev.tether.test': 'gateway-image' })
    .withWaitStrategy(Wait.forLogMessage(/tether gateway serving/))
    .withStartupTimeout(30000)
    .start();
  client = new TetherClient(`127.0.0.1:${port}`, 'tc-token');
});
after(async () => {
  client?.close();
  await gateway?.stop({ timeout: 15_000 }).catch(() => undefined);
  await removeInstance(instance);
});

test('the gateway image creates a hardened run container per run, and DeleteRun removes it', async () => {
  const run = await client.createRun({ conversationId: 'tc' });
  assert.equal(run.state, RunState.READY, run.error);
  const [c] = await containersOf(run.runId);
  assert.ok(c, 'a container labelled with the run id appeared');
  assert.equal(c.Image, runnerImage());
  assert.equal(c.Labels['dev.tether.tenant'], 'acme');
  assert.equal(c.Labels['dev.tether.instance'], instance);
  assert.equal(c.HostConfig.NetworkMode, 'none');

  await client.putFileMap(run.runId, { 'notes/hi.md': '# hello through the gateway image\n' });
  const out = await client.callTool(run.runId, 'read', { path: 'notes/hi.md' });
  assert.equal(out.result.isError, false, resultText(out.result));
  assert.match(resultText(out.result), /hello through the gateway image/);

  await client.deleteRun(run.runId);
  assert.equal((await containersOf(run.runId)).length, 0, 'the container vanished');
});

/** The file a loop device is bound to, or undefined when it is free. */
const backingFile = (device: string) => {
  const file = `/sys/block/${device.replace('/dev/', '')}/loop/backing_file`;
  return existsSync(file) ? readFileSync(file, 'utf8').trim() : undefined;
};

test('the gateway image gives a run a size-limited workspace on a loop device, and releases it on DeleteRun', async () => {
  const run = await client.createRun({ conversationId: 'disk', features: { eval: true }, limits: { diskMb: 48 } });
  assert.equal(run.state, RunState.READY, run.error);
  const [c] = await containersOf(run.runId);
  const volume = await docker.getVolume(c.Mounts.find((m) => m.Destination === '/workspace')!.Name!).inspect();
  const device = volume.Options?.device as string;
  assert.match(device, /^\/dev\/loop\d+$/);
  const image = backingFile(device);
  assert.ok(image, `${device} is bound`);
  const cell =
    "import os\nn = 0\ntry:\n    with open('f.bin', 'wb') as f:\n        while n < (200 << 20): n += f.write(b'\\0' * (1 << 20))\nexcept OSError as e:\n    print('stopped', n >> 20, e.strerror)";
  const out = await client.callTool(run.runId, 'eval', {
    code: cell,
    description: 'fill the workspace past its disk limit',
  });
  const m = /stopped (\d+) No space left on device/.exec(resultText(out.result));
  assert.ok(m && Number(m[1]) <= 48, resultText(out.result));
  const usage = (await client.getRun(run.runId)).usage;
  assert.ok(Number(usage?.diskBytes) > 32 * 2 ** 20, `usage ${usage?.diskBytes}`);
  await client.deleteRun(run.runId);
  // The device may be bound again at once, to a spare disk made meanwhile: never to the run's image.
  assert.notEqual(backingFile(device), image, "the run's disk is detached");
});

test('stopping the gateway container stops and removes its runs', async () => {
  const runs = await Promise.all([
    client.createRun({ conversationId: 'a' }),
    client.createRun({ conversationId: 'b' }),
  ]);
  for (const r of runs) assert.equal(r.state, RunState.READY, r.error);
  const boxes = (await Promise.all(runs.map((r) => containersOf(r.runId)))).flat();
  assert.equal(boxes.length, 2);
  const volumes = boxes.map((b) => b.Mounts.find((m) => m.Destination === '/workspace')!.Name!);
  const devices = await Promise.all(
    volumes.map(async (v) => (await docker.getVolume(v).inspect()).Options?.device as string),
  );
  const images = devices.map(backingFile);
  await gateway.stop({ timeout: 15_000 });
  await until(
    'the run containers to vanish',
    async () => (await Promise.all(runs.map((r) => containersOf(r.runId)))).flat().length === 0,
    10000,
  );
  for (const v of volumes)
    await assert.rejects(docker.getVolume(v).inspect(), /no such volume/i, `volume ${v} was removed`);
  for (const [i, d] of devices.entries()) assert.notEqual(backingFile(d), images[i], `${d} was detached`);
});
