import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, promises as fs, mkdtempSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { status } from '@grpc/grpc-js';
import { RunState } from '@tether/contract';
import { resultText, type TetherClient } from '@tether/client';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { containerOf, containersOf, docker, dockerConfig, execIn, removeInstance, until } from './support';

// Disk limits against the real engine: a loop-backed ext4 workspace per run.
let t: TestGateway;
const instance = `disk-${process.pid}`;
// A restart is the same gateway again: the same instance and the same state directory.
const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tether-disk-'));
const start = (over = {}) =>
  startTestGateway({ provider: 'docker', docker: dockerConfig(), instance, stateDir, ...over });
const MiB = 2 ** 20;

before(async () => {
  t = await start();
});
after(async () => {
  await t?.close();
  await removeInstance(instance);
});

/** Python: writes zeros to `path` in 8 MiB chunks up to `total` bytes; reports what stopped it. */
const fillCell = (path: string, total: number) => `
import os, json
written, err = 0, None
chunk = b'\\0' * (8 << 20)
try:
    with open(${JSON.stringify(path)}, 'wb') as f:
        while written < ${total}:
            written += f.write(chunk)
        f.flush(); os.fsync(f.fileno())
except OSError as e:
    err = f'{e.errno} {e.strerror}'
print(json.dumps({'written': written, 'error': err}))
`;

async function fill(client: TetherClient, runId: string, path: string, total: number) {
  const out = await client.callTool(runId, 'eval', {
    code: fillCell(path, total),
    description: 'fill a disk for the test',
  });
  const text = resultText(out.result);
  const m = /\{"written": (\d+), "error": (null|"[^"]*")\}/.exec(text);
  assert.ok(m, text);
  return { written: Number(m[1]), error: JSON.parse(m[2]) as string | null };
}

/** The workspace volume of a run and the image/device behind it. */
async function diskOf(runId: string) {
  const [c] = await containersOf(runId);
  const name = c.Mounts.find((m) => m.Destination === '/workspace')!.Name!;
  const v = await docker.getVolume(name).inspect();
  return { volume: name, image: v.Labels['dev.tether.disk-image'], device: v.Options?.device as string };
}

const backingOf = (device: string) => {
  try {
    return readFileSync(`/sys/block/${device.replace('/dev/', '')}/loop/backing_file`, 'utf8').trim();
  } catch {
    return '';
  }
};

async function read(client: TetherClient, runId: string, path: string) {
  const out = await client.callTool(runId, 'read', { path });
  assert.equal(out.result.isError, false, resultText(out.result));
  return resultText(out.result);
}

test('a 6 GiB write stops at the default 2 GiB limit with ENOSPC; the run lives, earlier files are intact, the host lost at most the limit', async () => {
  const limitMb = t.config.limits.default.diskMb;
  assert.equal(limitMb, 2048);
  const run = await t.alice.createRun({ conversationId: 'six-gib', features: { eval: true } });
  assert.equal(run.state, RunState.READY, run.error);
  assert.equal(run.limits?.diskMb, 2048, 'the default is reported');
  await t.alice.putFileMap(run.runId, { 'src/keep.txt': 'written before the flood\n' });
  const disk = await diskOf(run.runId);
  assert.match(disk.device, /^\/dev\/loop\d+$/);
  assert.equal(backingOf(disk.device), disk.image);

  const freeBefore = await fs.statfs(t.config.stateDir);
  const started = Date.now();
  const res = await fill(t.alice, run.runId, 'big.bin', 6 * 1024 * MiB);
  const ms = Date.now() - started;
  const freeAfter = await fs.statfs(t.config.stateDir);
  const dropped = (freeBefore.bavail - freeAfter.bavail) * freeBefore.bsize;
  const held = (await fs.stat(disk.image)).blocks * 512;
  console.log(
    `# 6 GiB attempt: wrote ${Math.round(res.written / MiB)} MiB in ${ms} ms, then "${res.error}"; host free space dropped ${Math.round(dropped / MiB)} MiB; the image holds ${Math.round(held / MiB)} MiB`,
  );
  assert.match(res.error ?? '', /^28 No space left on device/, 'ENOSPC inside the run');
  assert.ok(res.written > (limitMb - 128) * MiB && res.written <= limitMb * MiB, `wrote ${res.written}`);
  assert.ok(held <= limitMb * MiB, `the image holds ${held} bytes, at most the limit`);
  // Other engineers' builds share this disk: allow some unrelated drift on top of the limit.
  assert.ok(dropped <= (limitMb + 256) * MiB, `host free space dropped ${dropped} bytes`);

  assert.equal((await t.alice.getRun(run.runId)).state, RunState.READY, 'the run stays READY');
  assert.match(await read(t.alice, run.runId, 'src/keep.txt'), /written before the flood/);
  const w = await t.alice.callTool(run.runId, 'write', { path: 'more.txt', content: 'x'.repeat(4 * MiB) });
  assert.equal(w.result.isError, true);
  assert.match(resultText(w.result), /ENOSPC|no space left/i, 'the write tool says why');

  const usage = (await t.alice.getRun(run.runId)).usage;
  assert.ok(usage, 'GetRun reports usage');
  assert.ok(
    Number(usage.diskBytes) > (limitMb - 128) * MiB && Number(usage.diskBytes) <= limitMb * MiB,
    `disk ${usage.diskBytes}`,
  );
  assert.ok(Number(usage.memoryBytes) > MiB, `memory ${usage.memoryBytes}`);
  assert.ok(Number(usage.cpuTimeMs) > 100, `cpu ${usage.cpuTimeMs}`);
  assert.equal(
    (await t.alice.listRuns()).find((r) => r.runId === run.runId)?.usage,
    undefined,
    'ListRuns does not measure',
  );

  // Deleting the file gives the space back to the host (the volume is mounted with discard).
  await execIn(await containerOf(run.runId), ['rm', '/workspace/big.bin']);
  await execIn(await containerOf(run.runId), ['sync']);
  const after = Number((await t.alice.getRun(run.runId)).usage!.diskBytes);
  assert.ok(after < 64 * MiB, `after rm the image holds ${after} bytes`);

  await t.alice.deleteRun(run.runId);
  assert.equal(existsSync(disk.image), false, 'the image is deleted');
  assert.notEqual(backingOf(disk.device), disk.image, 'the loop device is detached');
  await assert.rejects(docker.getVolume(disk.volume).inspect(), /no such volume/i);
});

test('a requested disk_mb sizes the workspace; above the maximum or with a host workspace it is refused', async () => {
  const run = await t.alice.createRun({ conversationId: 'small', features: { eval: true }, limits: { diskMb: 64 } });
  assert.equal(run.state, RunState.READY, run.error);
  const res = await fill(t.alice, run.runId, 'f.bin', 256 * MiB);
  assert.match(res.error ?? '', /^28 /);
  assert.ok(res.written > 48 * MiB && res.written <= 64 * MiB, `wrote ${res.written}`);
  const ls = await execIn(await containerOf(run.runId), ['ls', '-A', '/workspace']);
  assert.equal(ls.stdout.trim(), 'f.bin', 'no lost+found in the workspace');
  const df = await execIn(await containerOf(run.runId), ['stat', '-f', '-c', '%T', '/workspace']);
  assert.match(df.stdout, /ext2\/ext3|ext4/);
  await t.alice.deleteRun(run.runId);
  await assert.rejects(
    t.alice.createRun({ limits: { diskMb: 10 ** 6 } }),
    (e: { code: number; details: string }) =>
      e.code === status.INVALID_ARGUMENT && /disk_mb .* maximum/.test(e.details),
  );
  await assert.rejects(
    t.alice.createRun({ limits: { diskMb: 8 } }),
    (e: { code: number; details: string }) => e.code === status.INVALID_ARGUMENT && /at least 16/.test(e.details),
  );
});

test('/tmp and home are capped at a quarter of the memory limit: ENOSPC, not an OOM kill', async () => {
  const run = await t.alice.createRun({ conversationId: 'tmp', features: { eval: true }, limits: { memoryMb: 256 } });
  assert.equal(run.state, RunState.READY, run.error);
  for (const where of ['/tmp/fill.bin', '/home/tether/fill.bin']) {
    const res = await fill(t.alice, run.runId, where, 200 * MiB);
    assert.match(res.error ?? '', /^28 /, where);
    assert.ok(res.written <= 64 * MiB, `${where}: wrote ${res.written}`);
    await execIn(await containerOf(run.runId), ['rm', '-f', where]);
  }
  const shm = await execIn(await containerOf(run.runId), ['df', '-k', '--output=size', '/dev/shm']);
  assert.match(shm.stdout, /65536/, '/dev/shm is 64 MiB');
  assert.equal((await t.alice.getRun(run.runId)).state, RunState.READY, 'the run is alive');
  await t.alice.deleteRun(run.runId);
});

/**
 * This instance's spare disks (image → loop device), of one size when named: other tests' runs
 * asked for other sizes, whose spares are kept too.
 */
async function spareDisks(sizeMb?: number): Promise<Map<string, string>> {
  const dir = path.join(stateDir, 'disks', instance);
  const out = new Map<string, string>();
  for (const name of await fs.readdir('/sys/block')) {
    const image = name.startsWith('loop') ? backingOf(`/dev/${name}`) : '';
    if (!image.startsWith(`${dir}/spare-`)) continue;
    const size = await fs.stat(image).then(
      (st) => st.size,
      () => -1,
    );
    if (sizeMb === undefined || size === sizeMb * MiB) out.set(image, `/dev/${name}`);
  }
  return out;
}

test('a cold start takes a disk made ahead of need; the spare is made again, and a stop releases every spare', async () => {
  // A size no other test asks for: its first start makes its own disk, then spares follow.
  const first = await t.alice.createRun({ conversationId: 'spare-1', limits: { diskMb: 96 } });
  assert.equal(first.state, RunState.READY, first.error);
  await until('two spares', async () => ((await spareDisks(96)).size === 2 ? true : undefined), 30_000);
  const spares = await spareDisks(96);

  const second = await t.alice.createRun({
    conversationId: 'spare-2',
    features: { eval: true },
    limits: { diskMb: 96 },
  });
  assert.equal(second.state, RunState.READY, second.error);
  const disk = await diskOf(second.runId);
  assert.equal(path.basename(disk.image), `${second.runId}.img`, 'renamed to the run');
  assert.ok([...spares.values()].includes(disk.device), `${disk.device} was a spare's device`);
  assert.equal(backingOf(disk.device), disk.image);
  const res = await fill(t.alice, second.runId, 'f.bin', 256 * MiB);
  assert.match(res.error ?? '', /^28 /, 'limited to its size');
  assert.ok(res.written > 64 * MiB && res.written <= 96 * MiB, `wrote ${res.written}`);
  const ls = await execIn(await containerOf(second.runId), ['ls', '-A', '/workspace']);
  assert.equal(ls.stdout.trim(), 'f.bin', 'an empty workspace, the run user its owner');
  await until('the spare made again', async () => ((await spareDisks(96)).size === 2 ? true : undefined), 30_000);

  await t.alice.deleteRun(first.runId);
  await t.alice.deleteRun(second.runId);
  assert.equal(existsSync(disk.image), false);
});

test('a restarted gateway re-attaches to the same volume and loop device; a crash leftover is swept', async () => {
  const run = await t.alice.createRun({ conversationId: 'restart', features: { eval: true }, limits: { diskMb: 64 } });
  assert.equal(run.state, RunState.READY, run.error);
  await t.alice.putFileMap(run.runId, { 'a.txt': 'before restart\n' });
  const disk = await diskOf(run.runId);
  const orphan = await t.alice.createRun({ conversationId: 'orphan', limits: { diskMb: 32 } });
  const orphanDisk = await diskOf(orphan.runId);
  t.alice.close();
  t.bob.close();
  await t.gateway.close({ keepRuns: true });
  assert.deepEqual([...(await spareDisks()).keys()], [], 'a stop releases its spare disks');
  // The gateway "died" after creating the volume, before the container: only the volume is left.
  await (await containerOf(orphan.runId)).remove({ force: true });

  t = await start();
  assert.equal((await t.alice.getRun(run.runId)).state, RunState.READY);
  assert.deepEqual(await diskOf(run.runId), disk, 'the same volume on the same device');
  assert.equal(backingOf(disk.device), disk.image);
  assert.match(await read(t.alice, run.runId, 'a.txt'), /before restart/);
  const res = await fill(t.alice, run.runId, 'f.bin', 256 * MiB);
  assert.match(res.error ?? '', /^28 /, 'still limited after the restart');
  assert.ok(
    Number((await t.alice.getRun(run.runId)).usage?.diskBytes) > 32 * MiB,
    'usage found through the volume label',
  );

  assert.equal(existsSync(orphanDisk.image), false, 'the orphan image is swept');
  assert.notEqual(backingOf(orphanDisk.device), orphanDisk.image, 'and its loop device detached');
  await assert.rejects(docker.getVolume(orphanDisk.volume).inspect(), /no such volume/i);
  await t.alice.deleteRun(run.runId);
  assert.equal(existsSync(disk.image), false);
});

test("disk quota: a tenant's total disk is refused exactly past the boundary; deleting frees it", async () => {
  const q = await startTestGateway({
    provider: 'docker',
    docker: dockerConfig(),
    instance: `${instance}-quota`,
    tenancy: { default: { diskMb: 192 }, tenants: {}, admission: { concurrency: 4 } },
  });
  try {
    const a = await q.alice.createRun({ limits: { diskMb: 128 } });
    const b = await q.alice.createRun({ limits: { diskMb: 64 } });
    assert.equal(b.state, RunState.READY, b.error);
    await assert.rejects(q.alice.createRun({ limits: { diskMb: 16 } }), (e: { code: number; details: string }) => {
      assert.equal(e.code, status.RESOURCE_EXHAUSTED);
      assert.match(e.details, /diskMb quota: limit 192 MiB, in use 192 MiB, this run asks 16 MiB/);
      return true;
    });
    assert.equal((await q.alice.listRuns()).length, 2, 'nothing half-created');
    assert.equal((await q.bob.createRun({ limits: { diskMb: 192 } })).state, RunState.READY, 'bob has his own quota');
    await q.alice.deleteRun(a.runId);
    const c = await q.alice.createRun({ limits: { diskMb: 128 } });
    assert.equal(c.state, RunState.READY, 'the deleted run freed its share');
  } finally {
    await q.close();
    await removeInstance(`${instance}-quota`);
  }
});
