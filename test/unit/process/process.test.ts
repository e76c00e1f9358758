import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, symlinkSync } from 'node:fs';
import * as path from 'node:path';
import {
  ProcessCloseStdinCommand,
  ProcessEndEvent,
  ProcessInputCommand,
  ProcessListCommand,
  ProcessResizeCommand,
  ProcessSignalCommand,
  ProcessStartCommand,
  type ProcessStartParams,
} from '../../../protocol/src/process';
import { OutputBatcher } from '../../../runner/src/tools/process/batcher';
import { alive, b64, commandsRun, groupMembers, until } from './harness';

const start = (r: Awaited<ReturnType<typeof commandsRun>>, p: Partial<ProcessStartParams> & { cmd: string }) =>
  r.command(ProcessStartCommand.type, { args: [], ...p });

async function pidOf(r: Awaited<ReturnType<typeof commandsRun>>, p: Partial<ProcessStartParams> & { cmd: string }) {
  const reply = await start(r, p);
  assert.ok(reply.ok, JSON.stringify(reply));
  return reply.pid;
}

test('the family exists only with features.commands', async () => {
  const r = await commandsRun({}, false);
  await assert.rejects(start(r, { cmd: 'true' }), /no command handler for process/);
});

test('a process: stdout and stderr apart, its exit code, and the end after all of its output', async (t) => {
  const r = await commandsRun();
  t.after(() => r.run.stop());
  const pid = await pidOf(r, { cmd: 'bash', args: ['-c', 'echo hi; echo err >&2; exit 3'] });
  const end = await r.ended(pid);
  assert.deepEqual(end, { pid, exitCode: 3 });
  assert.equal(r.output(pid, 'stdout'), 'hi\n');
  assert.equal(r.output(pid, 'stderr'), 'err\n');
  const mine = r.events.filter((e) => (e.payload as { pid?: number }).pid === pid);
  assert.equal(mine[mine.length - 1].kind, ProcessEndEvent.type.kind);
  assert.equal(mine.filter((e) => e.kind === ProcessEndEvent.type.kind).length, 1);
  assert.deepEqual((await r.command(ProcessListCommand.type, {})).processes, []);
});

test('cwd and env: resolved in the workspace, env added to the runner’s own', async (t) => {
  const r = await commandsRun();
  t.after(() => r.run.stop());
  mkdirSync(path.join(r.workspace, 'sub'));
  const pid = await pidOf(r, {
    cmd: 'sh',
    args: ['-c', 'pwd; echo "$GREETING"; test -n "$PATH" && echo path'],
    cwd: 'sub',
    env: { GREETING: 'hello there' },
  });
  await r.ended(pid);
  const [cwd, greeting, hasPath] = r.output(pid).trim().split('\n');
  assert.equal(path.basename(cwd), 'sub');
  assert.equal(greeting, 'hello there');
  assert.equal(hasPath, 'path');
});

test('stdin: a round trip through cat, then EOF ends it; input refused where there is no stdin', async (t) => {
  const r = await commandsRun();
  t.after(() => r.run.stop());
  const pid = await pidOf(r, { cmd: 'cat', stdin: true, tag: 'the-cat' });
  const [listed] = (await r.command(ProcessListCommand.type, {})).processes;
  assert.deepEqual(listed, { pid, cmd: 'cat', args: [], cwd: listed.cwd, env: {}, tag: 'the-cat', pty: false });
  assert.deepEqual(await r.command(ProcessInputCommand.type, { pid, data: b64('hello\n') }), { ok: true });
  await until(() => r.output(pid) === 'hello\n');
  assert.deepEqual(await r.command(ProcessInputCommand.type, { pid, data: b64('again\n') }), { ok: true });
  await until(() => r.output(pid) === 'hello\nagain\n');
  assert.deepEqual(await r.command(ProcessCloseStdinCommand.type, { pid }), { ok: true });
  assert.equal((await r.ended(pid)).exitCode, 0);
  const after = await r.command(ProcessInputCommand.type, { pid, data: b64('late') });
  assert.equal(after.ok === false && after.code, 'not_found');

  const closed = await pidOf(r, { cmd: 'cat' });
  assert.equal((await r.ended(closed)).exitCode, 0, 'without stdin, cat reads /dev/null and ends');
  const sleeper = await pidOf(r, { cmd: 'sleep', args: ['5'] });
  const refused = await r.command(ProcessInputCommand.type, { pid: sleeper, data: b64('x') });
  assert.deepEqual(refused, { ok: false, code: 'invalid', message: `process ${sleeper} was started without stdin` });
  const unknown = await r.command(ProcessInputCommand.type, { pid: 999_999_999, data: b64('x') });
  assert.equal(unknown.ok === false && unknown.code, 'not_found');
});

test('a signal reaches the whole process group', async (t) => {
  const r = await commandsRun();
  t.after(() => r.run.stop());
  const pid = await pidOf(r, { cmd: 'bash', args: ['-c', 'sleep 100 & sleep 100'] });
  await until(() => groupMembers(pid).length >= 3);
  const members = groupMembers(pid);
  assert.ok(members.includes(pid));
  assert.deepEqual(await r.command(ProcessSignalCommand.type, { pid, signal: 'SIGKILL' }), { ok: true });
  const end = await r.ended(pid);
  assert.equal(end.exitCode, -1);
  assert.equal(end.signal, 'SIGKILL');
  await until(() => members.every((m) => !alive(m)), 5000);
  const gone = await r.command(ProcessSignalCommand.type, { pid, signal: 'SIGTERM' });
  assert.equal(gone.ok === false && gone.code, 'not_found');
});

test('the end waits for output held by what the process left running', async (t) => {
  const r = await commandsRun();
  t.after(() => r.run.stop());
  const pid = await pidOf(r, { cmd: 'bash', args: ['-c', '(sleep 0.3; echo late) & echo early'] });
  const end = await r.ended(pid);
  assert.equal(end.exitCode, 0);
  assert.equal(r.output(pid), 'early\nlate\n');
});

test('the output cap kills the group and says so in the end', async (t) => {
  const cap = 256 * 1024;
  const r = await commandsRun({ process: { maxOutputBytes: cap } });
  t.after(() => r.run.stop());
  const pid = await pidOf(r, { cmd: 'yes' });
  const end = await r.ended(pid);
  assert.equal(end.error, `output exceeded ${cap} bytes: the process was killed`);
  assert.equal(end.signal, 'SIGKILL');
  assert.equal(Buffer.byteLength(r.output(pid)), cap);
  // Coalesced: a flood arrives in few, large events.
  assert.ok(r.outputs(pid).length <= 64, `${r.outputs(pid).length} output events`);
});

test('timeoutMs kills the group and names the timeout', async (t) => {
  const r = await commandsRun();
  t.after(() => r.run.stop());
  const began = Date.now();
  const pid = await pidOf(r, { cmd: 'bash', args: ['-c', 'sleep 30 & sleep 30'], timeoutMs: 300 });
  await until(() => groupMembers(pid).length >= 3);
  const members = groupMembers(pid);
  const end = await r.ended(pid);
  assert.match(end.error ?? '', /timed out after 300 ms/);
  assert.ok(Date.now() - began < 5000);
  await until(() => members.every((m) => !alive(m)), 5000);
});

test('starts that cannot run are refused, and bad input never throws', async (t) => {
  const r = await commandsRun({ process: { maxLiveProcesses: 2 } });
  t.after(() => r.run.stop());
  const missing = await start(r, { cmd: 'no-such-command-for-tether' });
  assert.deepEqual(missing, { ok: false, code: 'not_found', message: 'no such command: no-such-command-for-tether' });
  const refusals: [unknown, string, RegExp][] = [
    [{ cmd: 'true', env: { 'BAD-NAME': 'x' } }, 'invalid', /not a valid name/],
    [{ cmd: 'true', cwd: '../elsewhere' }, 'invalid', /escapes the workspace/],
    [{ cmd: 'true', cwd: 'nope' }, 'not_found', /does not exist/],
    [{ cmd: 'true', pty: { cols: 0, rows: 10 } }, 'invalid', /PTY size/],
    [{ cmd: 'true', timeoutMs: -1 }, 'invalid', /timeoutMs/],
    [{ cmd: '' }, 'invalid', /cmd/],
    [{ cmd: 5 }, 'invalid', /cmd/],
    [{ cmd: 'true', args: 'x' }, 'invalid', /args/],
    [null, 'invalid', /object/],
    [42, 'invalid', /object/],
  ];
  for (const [payload, code, message] of refusals) {
    const reply = await r.command(ProcessStartCommand.type, payload as ProcessStartParams);
    assert.equal(reply.ok, false, JSON.stringify(payload));
    assert.equal(!reply.ok && reply.code, code, JSON.stringify(payload));
    assert.match(!reply.ok ? reply.message : '', message, JSON.stringify(payload));
  }
  symlinkSync('/etc', path.join(r.workspace, 'etc'));
  const out = await start(r, { cmd: 'true', cwd: 'etc' });
  assert.equal(!out.ok && out.code, 'invalid');

  const a = await pidOf(r, { cmd: 'sleep', args: ['30'] });
  await pidOf(r, { cmd: 'sleep', args: ['30'] });
  const third = await start(r, { cmd: 'sleep', args: ['30'] });
  assert.equal(!third.ok && third.code, 'limit');
  await r.command(ProcessSignalCommand.type, { pid: a, signal: 'SIGTERM' });
  assert.equal((await r.ended(a)).signal, 'SIGTERM');
  assert.ok((await start(r, { cmd: 'true' })).ok, 'a slot is free again once one ended');

  for (const [type, payload] of [
    [ProcessInputCommand.type, { pid: a, data: 'not base64!' }],
    [ProcessInputCommand.type, { pid: 'x', data: '' }],
    [ProcessSignalCommand.type, { pid: a, signal: 'SIGSTOP' }],
    [ProcessResizeCommand.type, { pid: a, size: { cols: 'x' } }],
    [ProcessCloseStdinCommand.type, undefined],
  ] as const) {
    const reply = (await r.command(type as typeof ProcessInputCommand.type, payload as never)) as { ok: boolean };
    assert.equal(reply.ok, false, JSON.stringify(payload));
  }
  const sleeper = (await r.command(ProcessListCommand.type, {})).processes[0].pid;
  const notPty = await r.command(ProcessResizeCommand.type, { pid: sleeper, size: { cols: 80, rows: 24 } });
  assert.equal(!notPty.ok && notPty.code, 'invalid');
});

test('run stop kills every process', async () => {
  const r = await commandsRun();
  const pid = await pidOf(r, { cmd: 'bash', args: ['-c', 'sleep 100 & sleep 100'] });
  await until(() => groupMembers(pid).length >= 3);
  const members = groupMembers(pid);
  await r.run.stop();
  assert.equal(r.endOf(pid)?.error, 'the run stopped');
  await until(() => members.every((m) => !alive(m)), 5000);
  const late = await start(r, { cmd: 'true' });
  assert.equal(late.ok, false);
});

test('output is coalesced: a chatty process sends few events, in order', async (t) => {
  const r = await commandsRun();
  t.after(() => r.run.stop());
  const pid = await pidOf(r, { cmd: 'bash', args: ['-c', 'for i in $(seq 2000); do echo $i; done'] });
  await r.ended(pid);
  const expected = `${Array.from({ length: 2000 }, (_, i) => i + 1).join('\n')}\n`;
  assert.equal(r.output(pid), expected);
  assert.ok(r.outputs(pid).length < 200, `${r.outputs(pid).length} events for 2000 writes`);
});

test('the batcher sends after its delay or at its size, keeping the order of streams', async () => {
  const sent: [string, string][] = [];
  const b = new OutputBatcher((s, d) => sent.push([s, d.toString()]), 5, 8);
  b.push('stdout', Buffer.from('ab'));
  b.push('stdout', Buffer.from('cd'));
  b.push('stderr', Buffer.from('e'));
  assert.deepEqual(sent, []);
  await new Promise((r) => setTimeout(r, 20));
  assert.deepEqual(sent, [
    ['stdout', 'abcd'],
    ['stderr', 'e'],
  ]);
  b.push('stdout', Buffer.from('12345678'));
  assert.deepEqual(sent[2], ['stdout', '12345678'], 'a full batch goes at once');
});

test('a PTY session: size, resize, TERM, input and the exit code', async (t) => {
  const r = await commandsRun();
  t.after(() => r.run.stop());
  const size = await pidOf(r, { cmd: 'stty', args: ['size'], pty: { cols: 100, rows: 30 }, stdin: true });
  assert.equal((await r.ended(size)).exitCode, 0);
  assert.match(r.output(size, 'pty'), /^30 100\r?\n$/);

  const pid = await pidOf(r, {
    cmd: 'bash',
    args: ['--norc', '--noprofile', '-i'],
    pty: { cols: 80, rows: 24 },
    stdin: true,
    env: { PS1: '$ ' },
  });
  const [listed] = (await r.command(ProcessListCommand.type, {})).processes;
  assert.equal(listed.pty, true);
  const input = (s: string) => r.command(ProcessInputCommand.type, { pid, data: b64(s) });
  assert.deepEqual(await input('stty size\n'), { ok: true });
  await until(() => /24 80/.test(r.output(pid)));
  assert.deepEqual(await r.command(ProcessResizeCommand.type, { pid, size: { cols: 120, rows: 40 } }), { ok: true });
  await input('stty size; echo "T=$TERM"\n');
  await until(() => /40 120/.test(r.output(pid)) && /T=xterm-256color/.test(r.output(pid)));
  await input('echo hi\n');
  await until(() => /[\r\n]hi\r\n/.test(r.output(pid)));
  await input('exit 7\n');
  const end = await r.ended(pid);
  assert.equal(end.exitCode, 7);
  assert.ok(r.outputs(pid).every((o) => o.stream === 'pty'));
});

test('a PTY: EOF on closed stdin, signals to its session, a command that is not there', async (t) => {
  const r = await commandsRun();
  t.after(() => r.run.stop());
  const cat = await pidOf(r, { cmd: 'cat', pty: { cols: 80, rows: 24 }, stdin: true });
  await r.command(ProcessInputCommand.type, { pid: cat, data: b64('ping\n') });
  await until(() => /ping\r\nping\r\n/.test(r.output(cat)));
  assert.deepEqual(await r.command(ProcessCloseStdinCommand.type, { pid: cat }), { ok: true });
  assert.equal((await r.ended(cat)).exitCode, 0);

  const sh = await pidOf(r, { cmd: 'bash', args: ['-c', 'sleep 100 & sleep 100'], pty: { cols: 80, rows: 24 } });
  await new Promise((res) => setTimeout(res, 300));
  assert.deepEqual(await r.command(ProcessSignalCommand.type, { pid: sh, signal: 'SIGTERM' }), { ok: true });
  const end = await r.ended(sh);
  assert.equal(end.signal, 'SIGTERM', JSON.stringify(end));

  const missing = await start(r, { cmd: 'no-such-command-for-tether', pty: { cols: 80, rows: 24 } });
  assert.equal(!missing.ok && missing.code, 'not_found');
});
