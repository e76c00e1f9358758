import { after, afterEach, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { debugRun, fixture, type DebugRun } from './helpers';

/**
 * lldb-dap on a C program compiled here with -g, and delve on a Go module, in the runner
 * image. One run holds both projects, each under its own root marker.
 */
let t: TestGateway;
let d: DebugRun;

before(async () => {
  t = await startTestGateway();
  d = await debugRun(t, 'conv-native', {
    ...fixture('c', 'c'),
    ...fixture('go', 'go'),
    'gobad/go.mod': 'module example.com/bad\n\ngo 1.19\n',
    'gobad/main.go': 'package main\n\nfunc main() {\n\tprintln(undefinedThing)\n}\n',
  });
  await d.exec(['gcc', '-g', '-O0', '-o', 'c/prog', 'c/prog.c']);
});

afterEach(async () => {
  await d?.call({ op: 'terminate' });
});

after(async () => {
  if (d) await t.alice.deleteRun(d.runId).catch(() => undefined);
  await t?.close();
});

const values = (vars: { name: string; value: string }[]) => Object.fromEntries(vars.map((v) => [v.name, v.value]));

test('C with lldb-dap: breakpoint, stack, variables with a struct, step in, evaluate, run to exit', async () => {
  const rows = (await d.ok({ op: 'adapters' })).structured.adapters;
  const lldb = rows.find((a: { id: string }) => a.id === 'lldb');
  assert.equal(lldb.available, true);
  assert.equal(lldb.root, 'c');

  await d.ok({ op: 'breakpoints', file: 'c/prog.c', lines: [17] });
  const r = await d.ok({ op: 'launch', program: 'c/prog' });
  assert.match(r.text, /session dbg-\d+ \(lldb\) launched c\/prog/);
  assert.equal(r.structured.reason, 'breakpoint');
  assert.equal(r.structured.file, 'c/prog.c');
  assert.equal(r.structured.line, 17);
  assert.match(r.structured.sourceLine, /total \+= scale\(origin, i\);/);

  const frames = (await d.ok({ op: 'stack' })).structured.frames;
  assert.equal(frames[0].name, 'main');
  assert.equal(frames[0].file, 'c/prog.c');
  const locals = (await d.ok({ op: 'scopes', frame_id: frames[0].id })).structured.scopes.find(
    (s: { name: string }) => s.name === 'Locals',
  );
  const vars = (await d.ok({ op: 'variables', reference: locals.reference })).structured.variables;
  assert.deepEqual({ total: values(vars).total, i: values(vars).i }, { total: '0', i: '1' });
  const origin = vars.find((v: { name: string }) => v.name === 'origin');
  assert.ok(origin.reference > 0, 'a struct has children');
  assert.deepEqual(values((await d.ok({ op: 'variables', reference: origin.reference })).structured.variables), {
    x: '3',
    y: '4',
  });

  const inScale = await d.ok({ op: 'step_in' });
  assert.equal(inScale.structured.function, 'scale');
  assert.equal(inScale.structured.line, 9);
  assert.match((await d.ok({ op: 'evaluate', expression: 'p.x * k + 1' })).structured.value, /\b4\b/);
  assert.match((await d.fails({ op: 'evaluate', expression: 'no_such_name' })).text, /no_such_name/);

  await d.ok({ op: 'breakpoints', file: 'c/prog.c', lines: [] });
  const ended = await d.ok({ op: 'continue' });
  assert.equal(ended.structured.state, 'ended');
  assert.equal(ended.structured.exitCode, 0);
  assert.match((await d.ok({ op: 'output' })).structured.stdout, /i=3 total=42\n/);
});

test('Go with delve: breakpoint, stack, variables (struct and slice), evaluate, run to exit', async () => {
  await d.ok({ op: 'breakpoints', file: 'go/main.go', lines: [19] });
  const r = await d.ok({ op: 'launch', program: 'go', wait_seconds: 60 });
  assert.match(r.text, /\(delve\) launched go/);
  assert.equal(r.structured.reason, 'breakpoint');
  assert.equal(r.structured.file, 'go/main.go');
  assert.equal(r.structured.line, 19);

  const frames = (await d.ok({ op: 'stack' })).structured.frames;
  assert.equal(frames[0].name, 'main.main');
  assert.ok(frames.some((f: { name: string }) => f.name === 'runtime.main'));
  const locals = (await d.ok({ op: 'scopes', frame_id: frames[0].id })).structured.scopes[0];
  const vars = (await d.ok({ op: 'variables', reference: locals.reference })).structured.variables;
  assert.deepEqual({ total: values(vars).total, i: values(vars).i }, { total: '0', i: '1' });
  const origin = vars.find((v: { name: string }) => v.name === 'origin');
  assert.deepEqual(values((await d.ok({ op: 'variables', reference: origin.reference })).structured.variables), {
    X: '3',
    Y: '4',
  });
  const names = vars.find((v: { name: string }) => v.name === 'names');
  assert.deepEqual(
    Object.values(values((await d.ok({ op: 'variables', reference: names.reference })).structured.variables)),
    ['"a"', '"b"', '"c"'],
  );
  assert.equal(
    (await d.ok({ op: 'evaluate', expression: 'origin.X + i', frame_id: frames[0].id })).structured.value,
    '4',
  );

  await d.ok({ op: 'breakpoints', file: 'go/main.go', lines: [] });
  const ended = await d.ok({ op: 'continue' });
  assert.equal(ended.structured.state, 'ended');
  assert.equal(ended.structured.exitCode, 0);
  assert.match((await d.ok({ op: 'output' })).structured.stdout, /i 3 c total 42\n/);
  // dlv's binary was built in a scratch folder (in the project, /tmp being noexec): gone now.
  assert.doesNotMatch(await d.exec(['ls', '-a', 'go']), /tether-debug/);
});

test("a Go program that does not build: the compiler's words in the error, no session left, the next launch works", async () => {
  const r = await d.fails({ op: 'launch', program: 'gobad' });
  assert.match(r.text, /Build error/i);
  assert.match(r.text, /main\.go:4:\d+: undefined: undefinedThing/);
  assert.equal((await d.ok({ op: 'status' })).structured.session, null);
  const ok = await d.ok({ op: 'launch', program: 'go', wait_seconds: 60 });
  assert.equal(ok.structured.state, 'ended');
  assert.equal(ok.structured.exitCode, 0);
});

test('attach to a headless dlv serving a built Go binary inside the sandbox', async () => {
  await d.exec(['sh', '-c', 'cd go && go build -gcflags="all=-N -l" -o prog .']);
  const port = 7000 + Math.floor(Math.random() * 1000);
  const server = await d.spawnDetached([
    'dlv',
    'exec',
    '--headless',
    '--listen',
    `127.0.0.1:${port}`,
    '--accept-multiclient',
    '--api-version=2',
    'go/prog',
  ]);
  await d.ok({ op: 'breakpoints', file: 'go/main.go', lines: [19] });
  let r = await d.call({ op: 'attach', port, adapter: 'delve' });
  for (let i = 0; i < 40 && r.isError && /ECONNREFUSED/.test(r.text); i++) {
    await new Promise((res) => setTimeout(res, 250));
    r = await d.call({ op: 'attach', port, adapter: 'delve' });
  }
  assert.equal(r.isError, false, r.text);
  assert.match(r.text, /\(delve\) attached to port/);
  assert.equal(r.structured.file, 'go/main.go');
  assert.equal(r.structured.line, 19);
  assert.equal((await d.ok({ op: 'evaluate', expression: 'origin.Y * i' })).structured.value, '4');
  await d.ok({ op: 'breakpoints', file: 'go/main.go', lines: [] });
  assert.match((await d.ok({ op: 'terminate' })).text, /left running/);
  d.killGroup(server);
});

// lldb-server always launches its program with ASLR off, which needs personality(2): the
// container's seccomp profile refuses it, so there is no gdb-remote server to attach to there.
const noGdbServer =
  (process.env.TETHER_TEST_PROVIDER ?? 'process') === 'docker'
    ? 'lldb-server cannot start a program under the sandbox seccomp profile'
    : false;

test('attach lldb to an lldb-server gdbserver running the C program', { skip: noGdbServer }, async () => {
  const port = 8000 + Math.floor(Math.random() * 1000);
  const server = await d.spawnDetached(['lldb-server-19', 'gdbserver', `127.0.0.1:${port}`, 'c/prog']);
  await d.ok({ op: 'breakpoints', file: 'c/prog.c', lines: [9] });
  let r = await d.call({ op: 'attach', port, adapter: 'lldb' });
  for (let i = 0; i < 10 && r.isError && /failed to connect/i.test(r.text); i++) {
    await new Promise((res) => setTimeout(res, 250));
    r = await d.call({ op: 'attach', port, adapter: 'lldb' });
  }
  assert.equal(r.isError, false, r.text);
  assert.match(r.text, /\(lldb\) attached to port/);
  assert.equal(r.structured.function, 'scale');
  assert.equal(r.structured.line, 9);
  assert.match((await d.ok({ op: 'evaluate', expression: 'k' })).structured.value, /\b1\b/);
  await d.ok({ op: 'breakpoints', file: 'c/prog.c', lines: [] });
  await d.ok({ op: 'terminate' });
  d.killGroup(server);
});
