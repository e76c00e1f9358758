import { test } from 'node:test';
import assert from 'node:assert/strict';
import { linkSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { diskBytes, locateUsageFiles, readCgroupUsage, UsageReader } from '../../../runner/src/oom/usage';

/** A fake root with /proc/self/{cgroup,mountinfo} and the cgroup files a kernel would show. */
function root(cgroup: string, mountinfo: string, files: Record<string, string>): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-usage-'));
  const all = { 'proc/self/cgroup': cgroup, 'proc/self/mountinfo': mountinfo, ...files };
  for (const [rel, text] of Object.entries(all)) {
    mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    writeFileSync(path.join(dir, rel), text);
  }
  return dir;
}

const POD = '/kubepods/podf00/0123abcd';

test('cgroup v1 in a pod: memory without inactive file cache, CPU from cpuacct', () => {
  const dir = root(
    `12:pids:${POD}\n5:cpu,cpuacct:${POD}\n4:memory:${POD}\n0::/\n`,
    [
      '1200 1100 0:100 / / ro,relatime - overlay overlay rw',
      `1210 1200 0:31 ${POD} /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory`,
      `1212 1200 0:33 ${POD} /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct`,
    ].join('\n'),
    {
      'sys/fs/cgroup/memory/memory.usage_in_bytes': `${100 * 2 ** 20}\n`,
      'sys/fs/cgroup/memory/memory.stat': `cache 1\ninactive_file 7\ntotal_cache 1\ntotal_inactive_file ${20 * 2 ** 20}\n`,
      'sys/fs/cgroup/cpu,cpuacct/cpuacct.usage': '2500000000\n',
    },
  );
  const files = locateUsageFiles(dir);
  assert.equal(files?.version, 1);
  assert.deepEqual(readCgroupUsage(files!), { memoryBytes: 80 * 2 ** 20, cpuMillis: 2500 });
});

test('cgroup v2 under a cgroup namespace: memory.current and cpu.stat', () => {
  const dir = root('0::/\n', '1300 1200 0:40 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw,nsdelegate', {
    'sys/fs/cgroup/memory.current': '5000000\n',
    'sys/fs/cgroup/memory.stat': 'anon 1\nfile 3\ninactive_file 1000000\n',
    'sys/fs/cgroup/cpu.stat': 'usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n',
  });
  const files = locateUsageFiles(dir);
  assert.equal(files?.version, 2);
  assert.deepEqual(readCgroupUsage(files!), { memoryBytes: 4_000_000, cpuMillis: 1235 });
});

test('no cgroup mounted: the reader says so', () => {
  const dir = root('0::/\n', '1200 1100 0:100 / / ro,relatime - overlay overlay rw', {});
  assert.equal(locateUsageFiles(dir), undefined);
  assert.throws(() => new UsageReader(() => undefined, 5000, dir).read(), /no memory and cpu cgroup/);
});

test("disk: the workspace's blocks, a hard link once, and the walk kept for a while", () => {
  const ws = mkdtempSync(path.join(os.tmpdir(), 'tether-usage-ws-'));
  const empty = diskBytes(ws);
  mkdirSync(path.join(ws, 'a/b'), { recursive: true });
  writeFileSync(path.join(ws, 'a/b/big'), Buffer.alloc(1024 * 1024, 1));
  linkSync(path.join(ws, 'a/b/big'), path.join(ws, 'same'));
  const grown = diskBytes(ws);
  assert.ok(grown - empty >= 1024 * 1024, `${grown} - ${empty}`);
  assert.ok(grown - empty < 2 * 1024 * 1024, 'the hard link is counted once');
  // This machine's own cgroup (the test's process): real files, real figures.
  const reader = new UsageReader(() => ws, 60_000);
  const first = reader.read();
  assert.ok(first.memoryBytes > 0 && first.cpuMillis > 0, JSON.stringify(first));
  assert.equal(first.diskBytes, grown);
  writeFileSync(path.join(ws, 'more'), Buffer.alloc(1024 * 1024, 1));
  assert.equal(reader.read().diskBytes, grown, 'the walk is kept within diskEveryMs');
  assert.ok(new UsageReader(() => ws, 0).read().diskBytes >= grown + 1024 * 1024);
});
