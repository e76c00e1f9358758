import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PauseDepth, RunState } from '@tether/contract';
import { resultText, type TetherClient } from '@tether/client';
import { checkpointSupport } from '../../../gateway/src/sandbox/dockerCheckpoints';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { containersOf, docker, dockerConfig, removeInstance } from './support';

// Memory pauses against the real engine under gVisor: the whole sandbox is checkpointed and
// started again from the checkpoint, its runner reconnected; the kernel's variables, a staged
// edit and the language server are the very processes that were there before. Skipped, saying
// so, where the engine cannot take checkpoints of runsc containers (scripts/setup.sh with
// TETHER_WITH_RUNSC=1 sets that up).
const RUNTIME = process.env.TETHER_TEST_RUNTIME ?? 'runsc';
const instance = `pausemem-${process.pid}`;
const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tether-pausemem-'));
const features = { eval: true, ast: true, lsp: true };
let t: TestGateway | undefined;
let skip: string | false = false;

before(async () => {
  const support = await checkpointSupport(docker, RUNTIME);
  if (!support.ok) {
    skip = support.why;
    return;
  }
  t = await startTestGateway({
    provider: 'docker',
    docker: { ...dockerConfig(), runtime: RUNTIME },
    instance,
    stateDir,
    runs: { idlePauseSeconds: 0 },
  });
});
after(async () => {
  await t?.close();
  await removeInstance(instance);
});

async function evalIn(c: TetherClient, runId: string, code: string): Promise<string> {
  const out = await c.callTool(runId, 'eval', { code, description: 'a cell of the memory pause tests' });
  assert.equal(out.result.isError, false, resultText(out.result));
  return resultText(out.result);
}

/** Each process of the sandbox that runs a language server: pid and start time, from /proc. */
const SERVERS = `import os
found = []
for p in os.listdir('/proc'):
    if not p.isdigit(): continue
    try:
        cmd = open(f'/proc/{p}/cmdline', 'rb').read().replace(b'\\0', b' ').decode()
        start = open(f'/proc/{p}/stat').read().split(')')[1].split()[19]
    except OSError:
        continue
    if 'pyright' in cmd and 'langserver' in cmd: found.append(f'{p}@{start}')
print('servers', sorted(found))`;

test('a memory pause stops the sandbox; a call restores it with the kernel variable, the staged edit and the same language server', async (ctx) => {
  if (skip || !t) return ctx.skip(skip || 'no gateway');
  const run = await t.alice.createRun({ conversationId: 'pause-memory', features });
  assert.equal(run.state, RunState.READY, run.error);
  assert.equal(
    t.gateway.runs.ready('alice', run.runId).runner.transport,
    'unix',
    'the runner is reached over its socket',
  );
  await t.alice.putFileMap(run.runId, {
    'm.py': 'def old_api(a, b):\n    return a - b\n\n\nold_api(1, 2)\n',
    'pyproject.toml': '[project]\nname = "m"\nversion = "0.1.0"\n',
  });
  assert.match(
    await evalIn(t.alice, run.runId, 'import os\nrows = {i: i * i for i in range(1000)}\npid = os.getpid()\nlen(rows)'),
    /1000/,
  );
  const hover = await t.alice.callTool(run.runId, 'lsp', { action: 'hover', file: 'm.py', line: 5, symbol: 'old_api' });
  assert.equal(hover.result.isError, false, resultText(hover.result));
  const servers = (await evalIn(t.alice, run.runId, SERVERS)).match(/servers \[.*\]/)?.[0];
  assert.ok(servers && servers !== 'servers []', `a language server runs: ${servers}`);
  const staged = await t.alice.callTool(run.runId, 'ast_edit', {
    pattern: 'old_api($A, $B)',
    rewrite: 'new_api($B, $A)',
    path: '.',
  });
  assert.equal(staged.result.isError, false, resultText(staged.result));
  const editId = JSON.parse(staged.result.structuredJson).edit_id as string;
  const [box] = await containersOf(run.runId);

  const paused = await t.alice.pauseRun(run.runId);
  assert.equal(paused.state, RunState.PAUSED);
  assert.equal(paused.pause?.depth, PauseDepth.MEMORY, JSON.stringify(paused.pause?.notKept));
  const held = await containersOf(run.runId);
  assert.equal(held.length, 1, 'the stopped container holds the checkpoint');
  assert.equal(held[0]!.Id, box!.Id);
  assert.notEqual(held[0]!.State, 'running', 'no process of the run is left');

  // The next call restores it: the caller sees no error, and the first result says how.
  const first = await t.alice.callTool(run.runId, 'eval', {
    code: 'rows[999], pid == os.getpid()',
    description: 'the variable after a memory resume',
  });
  assert.equal(first.result.isError, false, resultText(first.result));
  assert.match(resultText(first.result), /998001, True/, 'the same kernel process, its variables with it');
  assert.match(resultText(first.result), /memory depth/i);
  assert.equal((await containersOf(run.runId))[0]!.Id, box!.Id, 'the same container, started from its checkpoint');
  assert.equal(
    (await evalIn(t.alice, run.runId, SERVERS)).match(/servers \[.*\]/)?.[0],
    servers,
    'the same language server process',
  );
  const again = await t.alice.callTool(run.runId, 'lsp', { action: 'hover', file: 'm.py', line: 5, symbol: 'old_api' });
  assert.equal(again.result.isError, false, resultText(again.result));
  const resolved = await t.alice.callTool(run.runId, 'resolve', { edit_id: editId, action: 'accept' });
  assert.equal(resolved.result.isError, false, resultText(resolved.result));
  assert.match(resultText((await t.alice.callTool(run.runId, 'read', { path: 'm.py' })).result), /new_api\(2, 1\)/);
  // A bridged call from a cell works right after a restore.
  assert.match(await evalIn(t.alice, run.runId, 'tool("read", {"path": "m.py"}).structured["totalLines"]'), /5/);

  // A second cycle on the restored container.
  assert.equal((await t.alice.pauseRun(run.runId)).pause?.depth, PauseDepth.MEMORY);
  assert.match(await evalIn(t.alice, run.runId, 'len(rows)'), /1000/);
  await t.alice.deleteRun(run.runId);
  assert.equal((await containersOf(run.runId)).length, 0);
});

test('a run whose memory checkpoint fails is paused at portable depth, saying why, and comes back', async (ctx) => {
  if (skip || !t) return ctx.skip(skip || 'no gateway');
  const run = await t.alice.createRun({ conversationId: 'pause-memory-fallback', features: { eval: true } });
  assert.equal(run.state, RunState.READY, run.error);
  // A cell holds a connected host Unix socket (a pair over the run's socket directory is
  // not reachable from a cell; the runner's own listener directory is): gVisor refuses to save it.
  await evalIn(
    t.alice,
    run.runId,
    `import socket, os
srv = socket.socket(socket.AF_UNIX); srv.bind('/run/tether/held.sock'); srv.listen(1)
cli = socket.socket(socket.AF_UNIX); cli.connect('/run/tether/held.sock')
conn, _ = srv.accept()
kept = 41
'connected'`,
  );
  const paused = await t.alice.pauseRun(run.runId);
  assert.equal(paused.state, RunState.PAUSED);
  assert.equal(paused.pause?.depth, PauseDepth.PORTABLE, 'the depth actually used');
  assert.match(paused.pause?.notKept.join('\n') ?? '', /memory checkpoint failed/);
  assert.equal((await containersOf(run.runId)).length, 0, 'a portable pause removes the container');
  // Where the sandbox outlived the failed checkpoint, the kernel's variable was serialized; where
  // runsc ended it with the checkpoint, the pause says the memory is lost and the files are kept.
  const lost = /sandbox ended with it/.test(paused.pause?.notKept.join('\n') ?? '');
  assert.match(await evalIn(t.alice, run.runId, lost ? '"kept" in globals()' : 'kept + 1'), lost ? /False/ : /42/);
  await t.alice.deleteRun(run.runId);
});

test('a fork at memory depth: each fork is a copy of the running sandbox, on its own workspace; the parent goes on', async (ctx) => {
  if (skip || !t) return ctx.skip(skip || 'no gateway');
  const run = await t.alice.createRun({ conversationId: 'fork-memory', features: { eval: true, lsp: true } });
  assert.equal(run.state, RunState.READY, run.error);
  await t.alice.putFileMap(run.runId, {
    'm.py': 'def area(r):\n    return 3 * r * r\n\n\narea(2)\n',
    'pyproject.toml': '[project]\nname = "m"\nversion = "0.1.0"\n',
  });
  assert.match(
    await evalIn(t.alice, run.runId, 'import os\nrows = list(range(1000))\npid = os.getpid()\nlen(rows)'),
    /1000/,
  );
  const [box] = await containersOf(run.runId);

  const forks = await t.alice.forkRun(run.runId, 2);
  assert.equal(forks.length, 2);
  for (const f of forks) {
    assert.equal(f.state, RunState.READY, f.error);
    assert.equal(f.pause?.depth, PauseDepth.MEMORY, 'copied at memory depth');
    // The very kernel of the parent, copied: its variables, and the pid it had there.
    const first = await t.alice.callTool(f.runId, 'eval', {
      code: 'rows[999], pid == os.getpid()',
      description: 'the variable in a fork at memory depth',
    });
    assert.equal(first.result.isError, false, resultText(first.result));
    assert.match(resultText(first.result), /999, True/);
    assert.match(resultText(first.result), new RegExp(`fork of run ${run.runId}, copied at memory depth`));
    const hover = await t.alice.callTool(f.runId, 'lsp', { action: 'hover', file: 'm.py', line: 5, symbol: 'area' });
    assert.equal(hover.result.isError, false, resultText(hover.result));
  }
  assert.equal((await containersOf(run.runId))[0]!.Id, box!.Id, 'the parent keeps its own container');
  assert.match(await evalIn(t.alice, run.runId, 'len(rows)'), /1000/, 'the parent goes on');

  // Forks are independent: nothing one writes is seen by another or by the parent.
  await evalIn(t.alice, forks[0]!.runId, 'rows.append("fork0")\nopen("only-fork0.txt", "w").write("x")');
  const seen = 'import os\n(len(rows), os.path.exists("only-fork0.txt"))';
  assert.match(await evalIn(t.alice, forks[0]!.runId, seen), /\(1001, True\)/);
  assert.match(await evalIn(t.alice, forks[1]!.runId, seen), /\(1000, False\)/);
  assert.match(await evalIn(t.alice, run.runId, seen), /\(1000, False\)/);

  // A fork pauses and resumes at memory depth like any run (its runner still proves the secret it
  // was copied with).
  const paused = await t.alice.pauseRun(forks[1]!.runId);
  assert.equal(paused.pause?.depth, PauseDepth.MEMORY, JSON.stringify(paused.pause?.notKept));
  assert.match(await evalIn(t.alice, forks[1]!.runId, 'len(rows)'), /1000/);

  for (const f of forks) await t.alice.deleteRun(f.runId);
  await t.alice.deleteRun(run.runId);
  for (const id of [run.runId, ...forks.map((f) => f.runId)]) assert.equal((await containersOf(id)).length, 0);
});

test('a restarted gateway finds memory forks again and reaches their runners', async (ctx) => {
  if (skip) return ctx.skip(skip);
  const own = { instance: `${instance}-restart`, stateDir: mkdtempSync(path.join(os.tmpdir(), 'tether-forkmem-')) };
  const options = {
    provider: 'docker' as const,
    docker: { ...dockerConfig(), runtime: RUNTIME, keepOnShutdown: true },
    ...own,
    runs: { idlePauseSeconds: 0 },
  };
  const first = await startTestGateway(options);
  let second: TestGateway | undefined;
  try {
    const run = await first.alice.createRun({ conversationId: 'fork-restart', features: { eval: true } });
    assert.equal(run.state, RunState.READY, run.error);
    await evalIn(first.alice, run.runId, 'kept = 7');
    const [fork] = await first.alice.forkRun(run.runId, 1);
    assert.equal(fork!.pause?.depth, PauseDepth.MEMORY);
    await first.close();

    second = await startTestGateway(options);
    const found = await second.alice.getRun(fork!.runId);
    assert.equal(found.state, RunState.READY, found.error);
    assert.match(await evalIn(second.alice, fork!.runId, 'kept * 6'), /42/);
    assert.match(await evalIn(second.alice, run.runId, 'kept'), /7/);
    // Deleted through the gateway: their workspace disks are released with them.
    await second.alice.deleteRun(fork!.runId);
    await second.alice.deleteRun(run.runId);
  } finally {
    await second?.close();
    await removeInstance(own.instance);
  }
});
