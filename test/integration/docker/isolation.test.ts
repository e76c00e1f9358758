import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type Docker from 'dockerode';
import { RunState } from '@tether/contract';
import { resultText } from '../../../clients/typescript/src';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { containerOf, dockerConfig, execIn, removeInstance, until } from './support';

// Isolation, each property proven from inside a run: the probe is `docker exec` into the
// run's container as the run's user, the same position a tool's child process is in.
let t: TestGateway;
let runId: string;
let box: Docker.Container;

const sh = (script: string, timeoutMs?: number) => execIn(box, ['bash', '-c', script], { timeoutMs });

async function read(run: string, path: string) {
  const out = await t.alice.callTool(run, 'read', { path });
  assert.equal(out.result.isError, false, resultText(out.result));
  return resultText(out.result);
}

before(async () => {
  t = await startTestGateway({ provider: 'docker', docker: dockerConfig() });
  const run = await t.alice.createRun({ conversationId: 'isolation', limits: { pids: 96, memoryMb: 512 } });
  assert.equal(run.state, RunState.READY, run.error);
  runId = run.runId;
  await t.alice.putFileMap(runId, { 'hello.txt': 'hello from the workspace\n' });
  box = await containerOf(runId);
});
after(async () => {
  await t?.close();
  await removeInstance(t.config.instance);
});

test('the container is created hardened', async () => {
  const info = await box.inspect();
  const hc = info.HostConfig;
  assert.equal(hc.NetworkMode, 'none');
  assert.deepEqual(hc.CapDrop, ['ALL']);
  assert.ok(hc.SecurityOpt?.includes('no-new-privileges'));
  assert.equal(hc.ReadonlyRootfs, true);
  assert.equal(hc.PidsLimit, 96);
  assert.equal(hc.Memory, 512 * 1024 * 1024);
  assert.equal(hc.NanoCpus, 2000 * 1e6);
  assert.equal(hc.LogConfig?.Type, 'none');
  assert.equal(info.Config.User, '1000:1000');
  assert.equal(info.Config.Labels['dev.tether.run-id'], runId);
  assert.equal(info.Config.Labels['dev.tether.tenant'], 'alice');
});

test('no network: only loopback exists, and connects to any address fail', async () => {
  const r = await sh(`ls /sys/class/net; python3 - <<'PY'
import socket
for host, port in [("1.1.1.1", 53), ("8.8.8.8", 443), ("10.0.0.1", 80), ("172.17.0.1", 2375), ("127.0.0.1", 9)]:
    s = socket.socket(); s.settimeout(2)
    try:
        s.connect((host, port)); print("CONNECTED", host)
    except OSError as e:
        print("refused", host, e.errno)
PY
getent hosts deb.debian.org || echo "no dns"`);
  assert.equal(r.stdout.split('\n')[0], 'lo', r.stdout + r.stderr);
  assert.doesNotMatch(r.stdout, /CONNECTED/);
  assert.equal(r.stdout.match(/^refused /gm)?.length, 5, r.stdout);
  assert.match(r.stdout, /no dns/);
});

test('the root filesystem is read-only; workspace, /tmp and HOME are writable', async () => {
  const r = await sh(
    'for d in /usr /etc /opt/tether /; do touch $d/probe 2>/dev/null && echo "WROTE $d" || echo "ro $d"; done; ' +
      'for d in /workspace /tmp "$HOME"; do touch $d/probe && echo "rw $d"; done; grep " / " /proc/mounts',
  );
  assert.doesNotMatch(r.stdout, /WROTE/, r.stdout);
  assert.match(r.stdout, /ro \/usr\nro \/etc\nro \/opt\/tether\nro \/\n/);
  assert.match(r.stdout, /rw \/workspace\nrw \/tmp\nrw \/home\/tether\n/);
  assert.match(r.stdout, / \/ overlay ro[,\s]/);
});

test('no process is root, none holds capabilities, none can gain privileges', async () => {
  const r = await sh(
    'id -u; stat -c %u /workspace/hello.txt; for f in /proc/[0-9]*/status; do awk \'/^(Name|Uid|CapEff|CapPrm|NoNewPrivs):/ {printf "%s %s ", $1, $2} END {print ""}\' $f 2>/dev/null; done',
  );
  const [uid, owner, ...procs] = r.stdout.trim().split('\n');
  assert.equal(uid, '1000');
  assert.equal(owner, '1000', 'files put by PutFiles belong to the run user');
  const seen = procs.filter((l) => l.startsWith('Name:'));
  assert.ok(
    // The runner runs as `node`, or `node-private` (its execute-only copy; docs/transport.md).
    seen.some((l) => /Name: node(-private)? /.test(l)),
    `the runner is among the processes:\n${r.stdout}`,
  );
  assert.ok(
    seen.some((l) => /Name: tini-private /.test(l)),
    `init (the execute-only tini) is among the processes:\n${r.stdout}`,
  );
  for (const p of seen.map((l) => `${l.trim()} `)) {
    assert.match(p, /Uid: 1000 /, p);
    assert.match(p, /CapPrm: 0000000000000000 /, p);
    assert.match(p, /CapEff: 0000000000000000 /, p);
    assert.match(p, /NoNewPrivs: 1 /, p);
  }
});

test('a fork bomb hits the pids limit and the run survives', async () => {
  // Forks until the kernel refuses; every child holds its pid for a few seconds, so the
  // run is saturated while the tool call below is made.
  const bomb = sh(
    `python3 - <<'PY'
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(4); os._exit(0)
        n += 1
except OSError as e:
    print("fork refused after", n, "errno", e.errno, flush=True)
time.sleep(4)
PY`,
    20000,
  );
  await new Promise((r) => setTimeout(r, 1500));
  assert.equal(
    await read(runId, 'hello.txt').then((s) => s.includes('hello from the workspace')),
    true,
    'the runner answers while the pids are exhausted',
  );
  const r = await bomb;
  const m = /fork refused after (\d+) errno 11/.exec(r.stdout);
  assert.ok(m, r.stdout + r.stderr);
  assert.ok(Number(m[1]) < 96, `forks stopped at the limit (${m[1]})`);
  await until('the children to exit', async () => (await sh('echo alive')).stdout === 'alive\n');
  assert.match(await read(runId, 'hello.txt'), /hello from the workspace/);
  assert.equal((await t.alice.getRun(runId)).state, RunState.READY);
});

test('a memory hog is OOM-killed: its run is FAILED with the reason, the gateway and other runs go on', async () => {
  const hog = await t.alice.createRun({ conversationId: 'hog', limits: { memoryMb: 128 } });
  assert.equal(hog.state, RunState.READY, hog.error);
  const hogBox = await containerOf(hog.runId);
  const r = await execIn(hogBox, ['python3', '-c', 'b = [bytearray(16 << 20) for _ in range(64)]; print("survived")'], {
    timeoutMs: 20000,
  });
  assert.doesNotMatch(r.stdout, /survived/);
  let last = '';
  const failed = await until('the hog run to fail', async () => {
    const run = await t.alice.getRun(hog.runId);
    last = `${RunState[run.state]} ${run.error}`;
    // FAILED comes first (the connection is lost); the engine's OOM reason follows within moments.
    return run.state === RunState.FAILED && /memory limit|OOM/.test(run.error) ? run : undefined;
  }).catch((err: Error) => assert.fail(`${err.message}; the run is ${last}; the hog printed ${JSON.stringify(r)}`));
  assert.match(failed.error, /memory limit|OOM/);
  const call = await t.alice.callTool(hog.runId, 'read', { path: 'x' }).then(
    () => 'answered',
    (e) => e.code,
  );
  assert.notEqual(call, 'answered');
  // The other run and the gateway are untouched.
  assert.match(await read(runId, 'hello.txt'), /hello from the workspace/);
  assert.equal((await t.alice.getRun(runId)).state, RunState.READY);
  await t.alice.deleteRun(hog.runId);
});
