import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { status } from '@grpc/grpc-js';
import { RunStart, RunState } from '@tether/contract';
import { TetherClient, resultText } from '../../../clients/typescript/src';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { LABELS } from '../../../gateway/src/sandbox/provider';
import { docker, dockerConfig, removeInstance, serveGateway, until } from '../docker/support';
import { buildNpmTemplate } from '../egress/npmTemplate';
import { freePort } from '../../helpers/ports';

// The warm pool against the real engine: pooled containers, their loop-backed workspaces,
// claims that survive a gateway's restart.
const instances: string[] = [];
after(async () => {
  for (const i of instances) await removeInstance(i);
});

const LIMITS = { memoryMb: 256, cpuMillis: 500, pids: 128, diskMb: 64 };

async function instanceContainers(instance: string) {
  return docker.listContainers({ all: true, filters: JSON.stringify({ label: [`${LABELS.instance}=${instance}`] }) });
}
async function instanceVolumes(instance: string) {
  return (
    (await docker.listVolumes({ filters: JSON.stringify({ label: [`${LABELS.instance}=${instance}`] }) })).Volumes ?? []
  );
}
/** Loop devices backed by a file under `dir`. */
function loopsUnder(dir: string): string[] {
  return execFileSync('losetup', ['-a', '-O', 'NAME,BACK-FILE', '-n'], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.includes(dir));
}

async function pooledGateway(
  over: { tenancy?: object; pool?: object; instance?: string; stateDir?: string } = {},
): Promise<TestGateway> {
  const instance = over.instance ?? `pool-${process.pid}-${Math.random().toString(36).slice(2, 6)}`;
  if (!instances.includes(instance)) instances.push(instance);
  const t = await startTestGateway({
    provider: 'docker',
    docker: dockerConfig(),
    instance,
    limits: { default: LIMITS },
    pool: { size: 2, maxTotal: 2, maxMemoryMb: 4096, concurrency: 2, ...over.pool },
    ...(over.stateDir ? { stateDir: over.stateDir } : {}),
    ...(over.tenancy ? { tenancy: over.tenancy } : {}),
  });
  return t;
}

const idle = (t: TestGateway) => t.gateway.pool.warm?.stats().classes[0]?.idle ?? 0;

async function read(client: TetherClient, runId: string, p: string) {
  const out = await client.callTool(runId, 'read', { path: p });
  return { ok: !out.result.isError, text: resultText(out.result) };
}

test('a pooled sandbox serves one run: the next run gets another container and an empty workspace', async () => {
  const t = await pooledGateway();
  try {
    await until('a full pool', async () => idle(t) === 2, 60_000);
    const a = await t.alice.createRun({ conversationId: 'first' });
    assert.equal(a.state, RunState.READY, a.error);
    assert.equal(a.start, RunStart.POOL);
    const aBox = t.gateway.runs.get('alice', a.runId).sandbox!.id;
    await t.alice.putFileMap(a.runId, { 'secret.txt': 'alice was here\n' });
    assert.match((await read(t.alice, a.runId, 'secret.txt')).text, /alice was here/);
    await t.alice.deleteRun(a.runId);
    await assert.rejects(
      docker.getContainer(aBox).inspect(),
      (e: { statusCode?: number }) => e.statusCode === 404,
      'removed, not returned to the pool',
    );

    await until('a full pool', async () => idle(t) === 2, 60_000);
    const b = await t.bob.createRun({ conversationId: 'second' });
    assert.equal(b.start, RunStart.POOL);
    const bBox = t.gateway.runs.get('bob', b.runId).sandbox!.id;
    assert.notEqual(bBox, aBox);
    assert.equal((await read(t.bob, b.runId, 'secret.txt')).ok, false, 'nothing of the earlier run');
    assert.deepEqual(Object.keys(await t.bob.getFileMap(b.runId, '')), [], 'the workspace starts empty');
    // A run asking for other limits starts cold.
    const c = await t.bob.createRun({ conversationId: 'other', limits: { memoryMb: 320 } });
    assert.equal(c.start, RunStart.COLD);
    assert.equal((await t.bob.getRun(b.runId)).start, RunStart.POOL);
  } finally {
    await t.close();
  }
  assert.deepEqual(await instanceContainers(t.config.instance), []);
  assert.deepEqual(await instanceVolumes(t.config.instance), []);
});

test('the pool at its maximum and a tenant near its memory quota: CreateRun is refused, nothing half-made', async () => {
  const t = await pooledGateway({ tenancy: { default: { memoryMb: 300 } } });
  try {
    await until('a full pool', async () => idle(t) === 2, 60_000);
    const a = await t.alice.createRun({ conversationId: 'fits' });
    assert.equal(a.start, RunStart.POOL);
    await until('a full pool', async () => idle(t) === 2, 60_000);
    const before = (await instanceContainers(t.config.instance)).map((c) => c.Id).sort();
    await assert.rejects(
      t.alice.createRun({ conversationId: 'over' }),
      (e: { code: number; details: string }) => e.code === status.RESOURCE_EXHAUSTED && /memoryMb/.test(e.details),
    );
    assert.equal(idle(t), 2, 'the pool gave nothing away');
    assert.deepEqual((await instanceContainers(t.config.instance)).map((c) => c.Id).sort(), before);
    assert.equal((await t.alice.listRuns()).length, 1);
  } finally {
    await t.close();
  }
});

test('graceful restart keeping runs: the claimed run answers again, idle ones are adopted and serve new runs', async () => {
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tether-pool-'));
  const instance = `pool-g-${process.pid}`;
  const first = await pooledGateway({ instance, stateDir });
  await until('a full pool', async () => idle(first) === 2, 60_000);
  const run = await first.alice.createRun({ conversationId: 'kept', labels: { team: 'x' } });
  assert.equal(run.start, RunStart.POOL);
  const box = first.gateway.runs.get('alice', run.runId).sandbox!.id;
  await first.alice.putFileMap(run.runId, { 'kept.txt': 'through a restart\n' });
  await until('a refilled pool', async () => idle(first) === 2, 60_000);
  await first.gateway.close({ keepRuns: true });
  first.alice.close();
  first.bob.close();
  const left = (await instanceContainers(instance)).map((c) => c.Id);
  assert.equal(left.length, 3, 'the claimed sandbox and the idle pool are left running');
  const idleBefore = left.filter((id) => id !== box).sort();

  const second = await pooledGateway({ instance, stateDir });
  try {
    assert.equal(idle(second), 2, 'the idle sandboxes are adopted on start, none started anew');
    assert.equal(second.gateway.pool.warm!.stats().classes[0].starting, 0);
    assert.deepEqual((await instanceContainers(instance)).map((c) => c.Id).sort(), left.sort());
    const again = await second.alice.getRun(run.runId);
    assert.equal(again.state, RunState.READY);
    assert.equal(again.start, RunStart.POOL);
    assert.deepEqual(again.labels, { team: 'x' });
    assert.match((await read(second.alice, run.runId, 'kept.txt')).text, /through a restart/);
    await assert.rejects(second.bob.getRun(run.runId), (e: { code: number }) => e.code === status.NOT_FOUND);

    const next = await second.bob.createRun({ conversationId: 'adopted' });
    assert.equal(next.state, RunState.READY, next.error);
    assert.equal(next.start, RunStart.POOL);
    assert.ok(idleBefore.includes(second.gateway.runs.get('bob', next.runId).sandbox!.id), 'an adopted sandbox');
    assert.deepEqual(Object.keys(await second.bob.getFileMap(next.runId, '')), [], 'its workspace starts empty');
    const w = await second.bob.callTool(next.runId, 'write', { path: 'n.txt', content: 'new run\n' });
    assert.equal(w.result.isError, false, resultText(w.result));
    await second.alice.deleteRun(run.runId);
    await second.bob.deleteRun(next.runId);
    assert.deepEqual(readdirSync(path.join(stateDir, 'pool', instance, 'claims')), []);
  } finally {
    await second.close();
  }
  assert.deepEqual(await instanceContainers(instance), []);
  assert.deepEqual(await instanceVolumes(instance), []);
  assert.deepEqual(loopsUnder(stateDir), []);
});

test('a claimed sandbox whose claim record is lost is removed on restart, never pooled again', async () => {
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tether-pool-'));
  const instance = `pool-l-${process.pid}`;
  const pool = { size: 1, maxTotal: 1 };
  const first = await pooledGateway({ instance, stateDir, pool });
  await until('a full pool', async () => idle(first) === 1, 60_000);
  const run = await first.alice.createRun({ conversationId: 'lost' });
  assert.equal(run.start, RunStart.POOL);
  const box = first.gateway.runs.get('alice', run.runId).sandbox!.id;
  await until('a refilled pool', async () => idle(first) === 1, 60_000);
  await first.gateway.close({ keepRuns: true });
  first.alice.close();
  first.bob.close();
  const [idleBox] = (await instanceContainers(instance)).map((c) => c.Id).filter((id) => id !== box);
  rmSync(path.join(stateDir, 'pool', instance, 'claims', `${box}.json`));

  const second = await pooledGateway({ instance, stateDir, pool });
  try {
    await assert.rejects(
      docker.getContainer(box).inspect(),
      (e: { statusCode?: number }) => e.statusCode === 404,
      'a runner bound to a run no record names is removed',
    );
    assert.equal(idle(second), 1);
    assert.deepEqual(
      (await instanceContainers(instance)).map((c) => c.Id),
      [idleBox],
      'the unbound one is adopted',
    );
    assert.equal((await second.alice.listRuns()).length, 0);
  } finally {
    await second.close();
  }
  assert.deepEqual(await instanceContainers(instance), []);
  assert.deepEqual(await instanceVolumes(instance), []);
  assert.deepEqual(loopsUnder(stateDir), []);
});

test('SIGKILL with claimed and idle pooled sandboxes: the run is re-found, idle ones adopted, nothing leaks', async () => {
  const instance = `pool-k-${process.pid}`;
  instances.push(instance);
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tether-pool-'));
  const port = await freePort();
  const serve = () =>
    serveGateway({
      TETHER_TOKENS: 'pool-token=acme',
      TETHER_INSTANCE: instance,
      TETHER_LISTEN: `127.0.0.1:${port}`,
      TETHER_HTTP_LISTEN: 'off',
      TETHER_IMAGE: dockerConfig().image,
      TETHER_PROVIDER: 'docker',
      TETHER_STATE_DIR: stateDir,
      TETHER_POOL_SIZE: '2',
    });
  const pooled = async () =>
    (await instanceContainers(instance)).filter((c) => c.Labels[LABELS.pool] !== undefined && c.State === 'running');
  const client = new TetherClient(`127.0.0.1:${port}`, 'pool-token');
  let second: ReturnType<typeof serve> | undefined;
  try {
    const first = serve();
    await first.ready;
    await until('a full pool', async () => (await pooled()).length === 2, 90_000);
    const run = await client.createRun({ conversationId: 'crash' });
    assert.equal(run.state, RunState.READY, run.error);
    assert.equal(run.start, RunStart.POOL);
    await client.putFileMap(run.runId, { 'kept.txt': 'through a crash\n' });
    await until('a refilled pool', async () => (await pooled()).length === 3, 90_000);
    const before = (await pooled()).map((c) => c.Id);
    first.child.kill('SIGKILL');
    await once(first.child, 'exit');

    second = serve();
    await second.ready;
    assert.deepEqual(
      (await pooled()).map((c) => c.Id).sort(),
      [...before].sort(),
      'the idle sandboxes are adopted, none started anew',
    );
    const again = await client.getRun(run.runId);
    assert.equal(again.state, RunState.READY, again.error);
    assert.equal(again.start, RunStart.POOL);
    assert.match((await read(client, run.runId, 'kept.txt')).text, /through a crash/);
    const next = await client.createRun({ conversationId: 'after' });
    assert.equal(next.state, RunState.READY, next.error);
    assert.equal(next.start, RunStart.POOL);
    assert.deepEqual(Object.keys(await client.getFileMap(next.runId, '')), [], 'an adopted sandbox starts empty');
    await until('a refilled pool', async () => (await pooled()).length === 4, 90_000);
    const after = (await pooled()).map((c) => c.Id);
    assert.equal(after.filter((id) => before.includes(id)).length, 3, 'every old pooled sandbox is still in use');
    await client.deleteRun(run.runId);
    await client.deleteRun(next.runId);
  } finally {
    client.close();
    second?.child.kill('SIGINT');
    if (second) await once(second.child, 'exit');
  }
  assert.deepEqual(await instanceContainers(instance), [], 'a graceful stop removes idle pooled sandboxes');
  assert.deepEqual(await instanceVolumes(instance), []);
  assert.deepEqual(loopsUnder(stateDir), []);
  assert.deepEqual(readdirSync(path.join(stateDir, 'pool', instance, 'claims')), []);
});

test('a template named in pool.templates is pooled: its runs claim a warm sandbox of its image', async () => {
  const name = 'pool-npm';
  const built = await buildNpmTemplate(name);
  const instance = `pool-tpl-${process.pid}`;
  instances.push(instance);
  const t = await startTestGateway({
    provider: 'docker',
    docker: dockerConfig(),
    instance,
    limits: { default: LIMITS },
    templates: { allowed: { alice: [name] } },
    pool: { size: 0, templates: { [name]: 1 }, maxTotal: 2, maxMemoryMb: 4096, concurrency: 1 },
  });
  try {
    await until('a warm sandbox of the template', async () => idle(t) === 1, 120_000);
    assert.equal(t.gateway.pool.warm?.stats().classes[0].image, built.tag);
    const base = await t.alice.createRun({ conversationId: 'base' });
    assert.equal(base.start, RunStart.COLD, 'the runner image has no pooled sandboxes here');
    const run = await t.alice.createRun({ conversationId: 'tpl', template: name });
    assert.equal(run.state, RunState.READY, run.error);
    assert.equal(run.start, RunStart.POOL);
    const box = t.gateway.runs.get('alice', run.runId).sandbox!.id;
    assert.equal((await docker.getContainer(box).inspect()).Config.Image, built.tag);
    await t.alice.putFileMap(run.runId, { 'a.txt': 'from a pooled template\n' });
    assert.match((await read(t.alice, run.runId, 'a.txt')).text, /from a pooled template/);
    await until('the template class refilled', async () => idle(t) === 1, 120_000);
    await t.alice.deleteRun(run.runId);
    await t.alice.deleteRun(base.runId);
  } finally {
    await t.close();
  }
});
