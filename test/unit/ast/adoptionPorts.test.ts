import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { type MessagePort, Worker } from 'node:worker_threads';
import { WorkerPoolEngine } from '../../../runner/src/tools/ast/pool';

/** A thread that takes the ports, as an index thread does, and ends. */
async function holdAndEnd(ports: MessagePort[]): Promise<void> {
  const w = new Worker('setInterval(() => {}, 1000)', { eval: true, workerData: { ports }, transferList: ports });
  await once(w, 'online');
  await w.terminate();
}

test('ports of an index thread that ended are let go: shards start later without error', async () => {
  const engine = new WorkerPoolEngine(2, 1 << 20);
  try {
    await holdAndEnd(engine.adoptionPorts());
    await holdAndEnd(engine.adoptionPorts());
    await new Promise((r) => setTimeout(r, 100)); // the ports' 'close' events
    const live = engine.adoptionPorts();
    assert.doesNotThrow(() => engine.treesComing());
    // The shards did start for the live ports, and answer a job.
    assert.deepEqual(await engine.run({ files: [], pattern: 'x', language: 'javascript' } as never), []);
    live.forEach((p) => p.close());
  } finally {
    await engine.close();
  }
});

test('a port closed just before the shard starts (its close event not yet come) is skipped', async () => {
  const engine = new WorkerPoolEngine(1, 1 << 20);
  try {
    const ports = engine.adoptionPorts();
    await holdAndEnd(ports);
    // No wait for the 'close' event: the port is dead but still queued.
    assert.doesNotThrow(() => engine.treesComing());
  } finally {
    await engine.close();
  }
});
