import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { PassThrough } from 'node:stream';
import { OOM_EXIT_CODE } from '../../../protocol/src/transport';
import { readBoot } from '../../../runner/src/connections/boot';
import { locateOomCounter, OomKillsReader, readMemoryLimit, readOomKills } from '../../../runner/src/oom/cgroup';
import { nameChild } from '../../../runner/src/oom/children';
import { checkOomBeforeAnswer, oomMessage, watchOomKills } from '../../../runner/src/oom/watcher';

const SECRET = 'ab'.repeat(32);

/** A fake root with /proc/self/{cgroup,mountinfo} and the cgroup files a kernel would show. */
function root(cgroup: string, mountinfo: string, files: Record<string, string>): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-oom-'));
  const all = { 'proc/self/cgroup': cgroup, 'proc/self/mountinfo': mountinfo, ...files };
  for (const [rel, text] of Object.entries(all)) {
    mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    writeFileSync(path.join(dir, rel), text);
  }
  return dir;
}

const POD = '/kubepods/podf00/0123abcd';
const V1_CONTAINER = {
  cgroup: `12:pids:${POD}\n4:memory:${POD}\n1:name=systemd:${POD}\n0::/\n`,
  mountinfo: [
    '1200 1100 0:100 / / ro,relatime - overlay overlay rw',
    `1210 1200 0:31 ${POD} /sys/fs/cgroup/memory ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory`,
    `1211 1200 0:32 ${POD} /sys/fs/cgroup/pids ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,pids`,
  ].join('\n'),
  files: {
    'sys/fs/cgroup/memory/memory.oom_control': 'oom_kill_disable 0\nunder_oom 0\noom_kill 3\n',
    'sys/fs/cgroup/memory/memory.limit_in_bytes': `${512 * 2 ** 20}\n`,
  },
};

test('cgroup v1 inside a container: the mounted memory cgroup is the container’s own', () => {
  const dir = root(V1_CONTAINER.cgroup, V1_CONTAINER.mountinfo, V1_CONTAINER.files);
  const found = locateOomCounter(dir);
  assert.ok(!('missing' in found), JSON.stringify(found));
  assert.equal(found.version, 1);
  assert.equal(found.file, path.join(dir, 'sys/fs/cgroup/memory/memory.oom_control'));
  assert.equal(readOomKills(found.file), 3);
  assert.equal(readMemoryLimit(found.limitFile), '512Mi');
});

test('cgroup v1 on a host: the process’s cgroup below the hierarchy’s root', () => {
  const dir = root(
    '4:memory:/runs/one\n0::/\n',
    '35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory',
    {
      'sys/fs/cgroup/memory/runs/one/memory.oom_control': 'oom_kill_disable 0\nunder_oom 0\noom_kill 0\n',
      'sys/fs/cgroup/memory/runs/one/memory.limit_in_bytes': '9223372036854771712\n',
    },
  );
  const found = locateOomCounter(dir);
  assert.ok(!('missing' in found));
  assert.equal(found.file, path.join(dir, 'sys/fs/cgroup/memory/runs/one/memory.oom_control'));
  assert.equal(readMemoryLimit(found.limitFile), undefined, 'no limit');
});

test('cgroup v2 under a cgroup namespace: memory.events of /', () => {
  const dir = root('0::/\n', '1300 1200 0:40 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw,nsdelegate', {
    'sys/fs/cgroup/memory.events': 'low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n',
    'sys/fs/cgroup/memory.max': `${256 * 2 ** 20}\n`,
  });
  const found = locateOomCounter(dir);
  assert.ok(!('missing' in found));
  assert.equal(found.version, 2);
  assert.equal(readOomKills(found.file), 1);
  assert.equal(readMemoryLimit(found.limitFile), '256Mi');
});

test('no memory cgroup (gVisor, a bare process), or a kernel without the counter: a reason, no counter', () => {
  const none = root('0::/\n', '1 0 0:1 / / rw - overlay overlay rw', {});
  assert.match((locateOomCounter(none) as { missing: string }).missing, /no memory cgroup is mounted/);
  const old = root(V1_CONTAINER.cgroup, V1_CONTAINER.mountinfo, {
    'sys/fs/cgroup/memory/memory.oom_control': 'oom_kill_disable 0\nunder_oom 0\n',
  });
  assert.match((locateOomCounter(old) as { missing: string }).missing, /no oom_kill counter in/);
  const empty = mkdtempSync(path.join(os.tmpdir(), 'tether-oom-'));
  assert.match((locateOomCounter(empty) as { missing: string }).missing, /cannot read the process's cgroups/);
  // and the watcher is not started: the runner goes on without it
  let exited = false;
  assert.equal(watchOomKills({ root: none, messagePath: '/nonexistent', exit: () => (exited = true) }), undefined);
  assert.equal(exited, false);
});

test('the message names what was killed and the limit', () => {
  const kernel = { what: 'the eval kernel', detail: 'python', pid: 57, at: 0 };
  const lsp = { what: 'the language server', detail: 'pyright-langserver', pid: 60, at: 0 };
  assert.equal(
    oomMessage(1, [kernel], '512Mi'),
    "OOMKilled: the eval kernel (python, pid 57) was killed at the run's memory limit (512Mi)",
  );
  assert.equal(oomMessage(1, [], undefined), "OOMKilled: a process in the run was killed at the run's memory limit");
  assert.match(
    oomMessage(3, [kernel, lsp], '1Gi'),
    /^OOMKilled: 3 processes were killed, among them the eval kernel .* and the language server/,
  );
});

test('a new OOM kill found by polling ends the runner with the termination message', async () => {
  const dir = root(V1_CONTAINER.cgroup, V1_CONTAINER.mountinfo, V1_CONTAINER.files);
  const messagePath = path.join(dir, 'termination-log');
  const exits: number[] = [];
  const watch = watchOomKills({ root: dir, messagePath, exit: (c) => exits.push(c), intervalMs: 20, nameWaitMs: 20 });
  assert.ok(watch);
  await new Promise((r) => setTimeout(r, 80));
  assert.deepEqual(exits, [], 'kills before the watch began do not count');
  writeFileSync(watch.counter.file, 'oom_kill_disable 0\nunder_oom 0\noom_kill 4\n');
  await new Promise((r) => setTimeout(r, 150));
  assert.deepEqual(exits, [OOM_EXIT_CODE]);
  assert.equal(
    readFileSync(messagePath, 'utf8'),
    "OOMKilled: a process in the run was killed at the run's memory limit (512Mi)",
  );
  watch.stop();
});

test('a named child dying of SIGKILL after a kill was counted is named at once', async () => {
  const dir = root(V1_CONTAINER.cgroup, V1_CONTAINER.mountinfo, V1_CONTAINER.files);
  const messagePath = path.join(dir, 'termination-log');
  const exits: number[] = [];
  // Polling slower than the test: only the child's exit can make the watcher look.
  const watch = watchOomKills({ root: dir, messagePath, exit: (c) => exits.push(c), intervalMs: 60_000 });
  assert.ok(watch);
  const child = spawn('sleep', ['30']);
  nameChild(child, 'the eval kernel', 'python');
  await new Promise((r) => child.once('spawn', r));
  // The kernel counts the kill before it sends SIGKILL.
  writeFileSync(watch.counter.file, 'oom_kill_disable 0\nunder_oom 0\noom_kill 4\n');
  child.kill('SIGKILL');
  await new Promise((r) => child.once('exit', r));
  assert.deepEqual(exits, [OOM_EXIT_CODE]);
  assert.equal(
    readFileSync(messagePath, 'utf8'),
    `OOMKilled: the eval kernel (python, pid ${child.pid}) was killed at the run's memory limit (512Mi)`,
  );
  watch.stop();
});

test('a kill counted before an answer leaves ends the runner first, whatever the poll', () => {
  const dir = root(V1_CONTAINER.cgroup, V1_CONTAINER.mountinfo, V1_CONTAINER.files);
  const exits: number[] = [];
  const watch = watchOomKills({
    root: dir,
    messagePath: path.join(dir, 'log'),
    exit: (c) => exits.push(c),
    intervalMs: 60_000,
  });
  assert.ok(watch);
  checkOomBeforeAnswer();
  assert.deepEqual(exits, [], 'no new kill: the answer goes');
  writeFileSync(watch.counter.file, 'oom_kill_disable 0\nunder_oom 0\noom_kill 5\n');
  checkOomBeforeAnswer();
  assert.deepEqual(exits, [OOM_EXIT_CODE]);
  assert.match(readFileSync(path.join(dir, 'log'), 'utf8'), /^OOMKilled: 2 processes/);
  watch.stop();
  checkOomBeforeAnswer();
  assert.deepEqual(exits, [OOM_EXIT_CODE], 'a stopped watch checks nothing');
});

test('the held counter reads what the file says now, at any length, and opens it again once closed', () => {
  const file = path.join(mkdtempSync(path.join(os.tmpdir(), 'tether-oom-')), 'memory.events');
  writeFileSync(file, 'low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n');
  const counter = new OomKillsReader(file);
  assert.equal(counter.read(), 0);
  writeFileSync(file, 'low 0\nhigh 0\nmax 0\noom 1\noom_kill 1\n');
  assert.equal(counter.read(), 1, 'the same descriptor, read again from the start');
  writeFileSync(file, `${'pad 0\n'.repeat(2000)}oom_kill 7\n`);
  assert.equal(counter.read(), 7, 'longer than one buffer');
  writeFileSync(file, 'oom_kill 2\n');
  assert.equal(counter.read(), 2, 'shorter again: nothing of the longer text is left');
  counter.close();
  rmSync(file);
  assert.equal(counter.read(), undefined);
  writeFileSync(file, 'oom_kill 3\n');
  assert.equal(counter.read(), 3, 'opened again once the file is back');
  counter.close();
});

test('a SIGKILL that the counter does not record (an interrupt) ends nothing', async () => {
  const dir = root(V1_CONTAINER.cgroup, V1_CONTAINER.mountinfo, V1_CONTAINER.files);
  const exits: number[] = [];
  const watch = watchOomKills({ root: dir, messagePath: path.join(dir, 'log'), exit: (c) => exits.push(c) });
  const child = spawn('sleep', ['30']);
  nameChild(child, 'the eval kernel', 'python');
  await new Promise((r) => child.once('spawn', r));
  child.kill('SIGKILL');
  await new Promise((r) => child.once('exit', r));
  assert.deepEqual(exits, []);
  watch?.stop();
});

test('the boot line carries the OOM option only with an absolute path', async () => {
  const boot = async (extra: object) => {
    const stdin = new PassThrough();
    stdin.end(`${JSON.stringify({ secret: SECRET, listen: {}, ...extra })}\n`);
    return readBoot(stdin);
  };
  assert.deepEqual((await boot({ oomExit: { messagePath: '/dev/termination-log' } })).oomExit, {
    messagePath: '/dev/termination-log',
  });
  assert.equal((await boot({})).oomExit, undefined);
  assert.equal((await boot({ oomExit: { messagePath: 'relative' } })).oomExit, undefined);
  assert.equal((await boot({ oomExit: 'yes' })).oomExit, undefined);
});
