import { after, afterEach, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { debugRun, fixture, python, type DebugRun } from './helpers';

/**
 * debugpy in the runner image, through gRPC → gateway → runner → adapter. One run (one
 * conversation) serves every case, one session after another, as an agent would use it.
 */
let t: TestGateway;
let d: DebugRun;

before(async () => {
  t = await startTestGateway();
  d = await debugRun(t, 'conv-python', fixture('python'));
});

// A failed case must not leave its session behind for the next one.
afterEach(async () => {
  await d?.call({ op: 'terminate' });
});

after(async () => {
  if (d) await t.alice.deleteRun(d.runId).catch(() => undefined);
  await t?.close();
});

test('adapters lists all four rows: debugpy available, the others saying which half is missing', async () => {
  const r = await d.ok({ op: 'adapters' });
  const rows = Object.fromEntries(r.structured.adapters.map((a: any) => [a.id, a]));
  assert.deepEqual(Object.keys(rows).sort(), ['dart', 'debugpy', 'delve', 'lldb']);
  assert.equal(rows.debugpy.available, true);
  assert.equal(rows.debugpy.root, '.');
  assert.match(rows.dart.binaryMissing, /dart not on PATH/);
  assert.match(rows.delve.markerMissing, /go\.mod/);
  assert.equal(rows.delve.binaryMissing, undefined, 'dlv itself is installed');
  assert.match(r.text, /dart\s+unavailable — binary missing/);
});

test('breakpoint in a loop, stack, scopes, variables, evaluate per frame, steps, continue to exit, output', async () => {
  const bp = await d.ok({ op: 'breakpoints', file: 'app.py', lines: [12] });
  assert.equal(bp.structured.pending, true);

  const launched = await d.ok({ op: 'launch', program: 'app.py' });
  assert.match(launched.text, /stopped \(breakpoint\) at app\.py:12 in main/);
  assert.match(launched.text, /12 \|\s+total \+= square\(i\)/);
  assert.equal(launched.structured.line, 12);

  const stack = await d.ok({ op: 'stack' });
  const frames = stack.structured.frames;
  assert.deepEqual(
    frames.map((f: any) => [f.name, f.file, f.line]),
    [
      ['main', 'app.py', 12],
      ['<module>', 'app.py', 19],
    ],
  );
  const [mainFrame, moduleFrame] = frames.map((f: any) => f.id);

  const scopes = await d.ok({ op: 'scopes', frame_id: mainFrame });
  const locals = scopes.structured.scopes.find((s: any) => s.name === 'Locals');
  assert.ok(locals.reference > 0);
  const vars = await d.ok({ op: 'variables', reference: locals.reference });
  const byName = Object.fromEntries(vars.structured.variables.map((v: any) => [v.name, v.value]));
  assert.equal(byName.i, '0');
  assert.equal(byName.total, '0');

  // The same expression means different things in different frames.
  assert.equal((await d.ok({ op: 'evaluate', expression: 'i + 100', frame_id: mainFrame })).structured.value, '100');
  const raised = await d.fails({ op: 'evaluate', expression: 'i + 100', frame_id: moduleFrame });
  assert.match(raised.text, /NameError: name 'i' is not defined/);
  assert.match((await d.fails({ op: 'evaluate', expression: '1 / 0' })).text, /ZeroDivisionError/);

  const into = await d.ok({ op: 'step_in' });
  assert.equal(into.structured.function, 'square');
  assert.equal(into.structured.line, 5);
  const squareFrame = (await d.ok({ op: 'stack' })).structured.frames[0].id;
  const over = await d.ok({ op: 'step_over' });
  assert.equal(over.structured.line, 6);
  const out = await d.ok({ op: 'step_out' });
  assert.equal(out.structured.function, 'main');
  assert.equal(out.structured.line, 12);

  // A reference from an older stop is refused, not answered with whatever now has that number.
  const stale = await d.fails({ op: 'variables', reference: locals.reference });
  assert.match(stale.text, /from an older stop/);
  assert.match((await d.fails({ op: 'scopes', frame_id: squareFrame })).text, /frame \d+ is from an older stop/);
  assert.match((await d.fails({ op: 'scopes', frame_id: 987654 })).text, /frame 987654 does not exist/);

  const again = await d.ok({ op: 'continue' });
  assert.equal(again.structured.reason, 'breakpoint');
  assert.equal(again.structured.line, 12);
  const fresh = (await d.ok({ op: 'stack' })).structured.frames[0].id;
  const ref = (await d.ok({ op: 'scopes', frame_id: fresh })).structured.scopes[0].reference;
  const now = Object.fromEntries(
    (await d.ok({ op: 'variables', reference: ref })).structured.variables.map((v: any) => [v.name, v.value]),
  );
  assert.equal(now.i, '1');
  assert.equal(now.total, '0');

  assert.match((await d.ok({ op: 'threads' })).text, /MainThread/);
  const status = await d.ok({ op: 'status' });
  assert.equal(status.structured.state, 'stopped');
  assert.match(status.text, /session dbg-1 \(debugpy, app\.py\)/);

  await d.ok({ op: 'breakpoints', file: 'app.py', lines: [] });
  const ended = await d.ok({ op: 'continue' });
  assert.equal(ended.structured.state, 'ended');
  assert.equal(ended.structured.exitCode, 0);
  const output = await d.ok({ op: 'output' });
  assert.equal(output.structured.stdout, 'step 0 total 0\nstep 1 total 1\nstep 2 total 5\nstep 3 total 14\n');
  assert.equal(output.structured.stderr, 'done 14\n');
  assert.match(output.text, /step 3 total 14\n--- stderr ---\ndone 14\n$/);
  assert.match((await d.fails({ op: 'stack' })).text, /no debug session is running/);
});

test('a second launch is refused and names the live session; terminate ends it and the next launch works', async () => {
  await d.ok({ op: 'breakpoints', file: 'app.py', lines: [5] });
  await d.ok({ op: 'launch', program: 'app.py' });
  const refused = await d.fails({ op: 'launch', program: 'app.py' });
  assert.match(refused.text, /already live in this conversation: dbg-\d+ \(debugpy, app\.py, stopped at app\.py:5\)/);
  assert.match(refused.text, /op "terminate"/);
  await d.fails({ op: 'attach', port: 5678 });
  const ended = await d.ok({ op: 'terminate' });
  assert.equal(ended.structured.terminated, true);
  assert.equal((await d.ok({ op: 'launch', program: 'app.py' })).structured.line, 5);
  await d.ok({ op: 'terminate' });
  await d.ok({ op: 'breakpoints', file: 'app.py', lines: [] });
});

test('bad input: outside the workspace, line 0, past the end, a missing program, a program nobody debugs', async () => {
  assert.match((await d.fails({ op: 'breakpoints', file: '../etc/passwd', lines: [1] })).text, /escapes the workspace/);
  assert.match((await d.fails({ op: 'breakpoints', file: '/etc/passwd', lines: [1] })).text, /escapes the workspace/);
  assert.match((await d.fails({ op: 'breakpoints', file: 'app.py', lines: [0] })).text, /invalid arguments/);
  assert.match(
    (await d.fails({ op: 'breakpoints', file: 'app.py', lines: [400] })).text,
    /past the end of app\.py \(19 lines\)/,
  );
  assert.match((await d.fails({ op: 'launch', program: 'nope.py' })).text, /program not found: nope\.py/);
  assert.match(
    (await d.fails({ op: 'launch', program: 'requirements.txt' })).text,
    /no debug adapter fits requirements\.txt: tried dart .* debugpy .* lldb .* delve/,
  );
  assert.match((await d.fails({ op: 'launch' })).text, /missing required argument "program"/);
  assert.match((await d.fails({ op: 'scopes', frame_id: 1 })).text, /no debug session is running/);
});

test('a debuggee that exits early: exit code and output, the session cleared, the next launch works', async () => {
  // debugpy stops on an uncaught non-zero SystemExit, as it would in an editor: say so, then let it go.
  const r = await d.ok({ op: 'launch', program: 'early_exit.py' });
  assert.equal(r.structured.reason, 'exception');
  assert.match(r.text, /stopped \(exception: SystemExit: 7\) at early_exit\.py:4/);
  const ended = await d.ok({ op: 'continue' });
  assert.equal(ended.structured.state, 'ended');
  assert.equal(ended.structured.exitCode, 7);
  assert.match(ended.text, /leaving before any breakpoint/);
  assert.equal((await d.ok({ op: 'status' })).structured.session, null);
  // No breakpoint at all: the program runs to its end inside launch.
  const next = await d.ok({ op: 'launch', program: 'app.py' });
  assert.equal(next.structured.state, 'ended');
  assert.equal(next.structured.exitCode, 0);
});

test('a program that never stops: "still running" at the bound, then pause stops it where it is', async () => {
  const r = await d.ok({ op: 'launch', program: 'spin.py', wait_seconds: 1.5 });
  assert.equal(r.structured.state, 'running');
  assert.match(r.text, /still running after 1\.5s/);
  assert.match((await d.fails({ op: 'stack' })).text, /it is running/);
  const paused = await d.ok({ op: 'pause' });
  assert.equal(paused.structured.state, 'stopped');
  assert.equal(paused.structured.reason, 'pause');
  const count = Number((await d.ok({ op: 'evaluate', expression: 'count' })).structured.value);
  assert.ok(count > 0);
  await d.ok({ op: 'terminate' });
});

test('attach to a debugpy-started process listening on a port inside the sandbox', async () => {
  const port = 5678 + Math.floor(Math.random() * 1000);
  const group = await d.spawnDetached([python(t), '-m', 'debugpy', '--listen', `127.0.0.1:${port}`, 'spin.py']);
  await d.ok({ op: 'breakpoints', file: 'spin.py', lines: [5] });
  let r = await d.call({ op: 'attach', port });
  for (let i = 0; i < 40 && r.isError && /ECONNREFUSED/.test(r.text); i++) {
    await new Promise((res) => setTimeout(res, 250));
    r = await d.call({ op: 'attach', port });
  }
  assert.equal(r.isError, false, r.text);
  assert.match(r.text, /attached to port \d+/);
  assert.equal(r.structured.reason, 'breakpoint');
  assert.equal(r.structured.file, 'spin.py');
  assert.equal(r.structured.line, 5);
  const pid = Number((await d.ok({ op: 'evaluate', expression: '__import__("os").getpid()' })).structured.value);
  await d.ok({ op: 'breakpoints', file: 'spin.py', lines: [] });
  const ended = await d.ok({ op: 'terminate' });
  assert.match(ended.text, /left running/);
  assert.equal(await d.alive(pid), true, 'detaching left the program running');
  d.killGroup(group);
});

test('an adapter killed mid-session: a clear error, its program gone with it, the next launch works', async () => {
  await d.ok({ op: 'breakpoints', file: 'app.py', lines: [12] });
  await d.ok({ op: 'launch', program: 'app.py' });
  const debuggee = Number((await d.ok({ op: 'evaluate', expression: '__import__("os").getpid()' })).structured.value);
  const adapterPid = (await d.ok({ op: 'status' })).structured.adapterPid;
  assert.ok(adapterPid > 0);
  d.kill(adapterPid);
  const after = await d.fails({ op: 'stack' });
  assert.match(after.text, /debug adapter was killed by SIGKILL/);
  assert.equal((await d.ok({ op: 'status' })).structured.session, null);
  assert.equal(await d.alive(debuggee), false, 'the debuggee went with its adapter');
  assert.equal((await d.ok({ op: 'launch', program: 'app.py' })).structured.line, 12);
  await d.ok({ op: 'terminate' });
  await d.ok({ op: 'breakpoints', file: 'app.py', lines: [] });
});

test('a project-local .venv is the interpreter the program runs on', async () => {
  await d.exec([python(t), '-m', 'venv', '--system-site-packages', '.venv']);
  const rows = (await d.ok({ op: 'adapters' })).structured.adapters;
  assert.equal(rows.find((a: any) => a.id === 'debugpy').interpreter.endsWith('/.venv/bin/python'), true);
  const r = await d.ok({ op: 'launch', program: 'which_python.py' });
  assert.equal(r.structured.exitCode, 0);
  const out = (await d.ok({ op: 'output' })).text;
  assert.match(out, /prefix \S*\/\.venv\n/);
  assert.match(out, /executable \S*\/\.venv\/bin\/python/);
});
