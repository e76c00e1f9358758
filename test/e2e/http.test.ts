import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createClient, type Client } from '@connectrpc/connect';
import { createConnectTransport, Http2SessionManager } from '@connectrpc/connect-node';
import { Gateway, ProcessSignal, type ProcessEvent } from '@tether/contract';
import { startTestGateway, type TestGateway } from '../helpers/gateway';

// tether's own API over Connect on the HTTP listener, against the real runner (process provider):
// curl for runs and tool calls, fetch for a server stream over HTTP/1.1, connect-node's client
// over HTTP/2 for a PTY session and a signal.

let t: TestGateway;
let base: string;
let sessions: Http2SessionManager;
let client: Client<typeof Gateway>;

function curl(method: string, body: unknown, extra: string[] = []): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) =>
    execFile(
      'curl',
      [
        '-sS',
        ...extra,
        '-H',
        'authorization: Bearer token-alice',
        '-H',
        'content-type: application/json',
        '-d',
        JSON.stringify(body),
        `${base}/tether.v1.Gateway/${method}`,
      ],
      (err, out) => (err ? reject(err) : resolve(JSON.parse(out) as Record<string, unknown>)),
    ),
  );
}

const textOf = (result: Record<string, unknown>) =>
  ((result.content as { text?: string }[]) ?? []).map((c) => c.text ?? '').join('');

/** A server stream over HTTP/1.1: the enveloped JSON request, the messages and the end-of-stream message back. */
async function serverStream(method: string, req: unknown) {
  const data = Buffer.from(JSON.stringify(req));
  const head = Buffer.alloc(5);
  head.writeUInt32BE(data.length, 1);
  const res = await fetch(`${base}/tether.v1.Gateway/${method}`, {
    method: 'POST',
    headers: { 'content-type': 'application/connect+json', authorization: 'Bearer token-alice' },
    body: Buffer.concat([head, data]),
  });
  assert.equal(res.status, 200);
  const buf = Buffer.from(await res.arrayBuffer());
  const messages: Record<string, Record<string, unknown> | string>[] = [];
  let end: unknown;
  for (let i = 0; i < buf.length; ) {
    const len = buf.readUInt32BE(i + 1);
    const msg = JSON.parse(buf.subarray(i + 5, i + 5 + len).toString());
    if (buf.readUInt8(i) & 0x02) end = msg;
    else messages.push(msg);
    i += 5 + len;
  }
  return { messages, end };
}

const bytes = (events: ProcessEvent[], kind: 'stdout' | 'stderr' | 'pty') =>
  Buffer.concat(events.flatMap((e) => (e.event.case === kind ? [Buffer.from(e.event.value)] : []))).toString();

before(async () => {
  t = await startTestGateway({ provider: 'process', http: { listen: '127.0.0.1:0' } });
  base = `http://${t.gateway.httpAddress}`;
  sessions = new Http2SessionManager(base);
  client = createClient(
    Gateway,
    createConnectTransport({
      baseUrl: base,
      httpVersion: '2',
      sessionManager: sessions,
      interceptors: [
        (next) => (req) => {
          req.header.set('authorization', 'Bearer token-alice');
          return next(req);
        },
      ],
    }),
  );
});

after(async () => {
  sessions.abort();
  await t.close();
});

test('curl: create a run, write a file and read it back through InvokeTool, delete the run', async () => {
  const run = await curl('CreateRun', { features: { commands: true } });
  assert.equal(run.state, 'RUN_STATE_READY', JSON.stringify(run));
  const runId = run.runId as string;
  const wrote = await curl('InvokeTool', {
    runId,
    tool: 'write',
    argumentsJson: JSON.stringify({ path: 'notes/hello.txt', content: 'hello over HTTP\n' }),
  });
  assert.equal(wrote.isError, false, JSON.stringify(wrote));
  const read = await curl(
    'InvokeTool',
    { runId, tool: 'read', argumentsJson: JSON.stringify({ path: 'notes/hello.txt' }) },
    ['--http2-prior-knowledge'],
  );
  assert.equal(read.isError, false, JSON.stringify(read));
  assert.match(textOf(read), /hello over HTTP/);
  assert.equal(JSON.parse(read.structuredJson as string).content, 'hello over HTTP\n');
  assert.equal((await curl('GetRun', { runId })).state, 'RUN_STATE_READY');
  // The file is there for the gRPC client too: one run, whichever port.
  assert.equal((await t.alice.getFileMap(runId))['notes/hello.txt']?.toString(), 'hello over HTTP\n');
  assert.deepEqual(await curl('DeleteRun', { runId }), {});
  assert.equal((await curl('GetRun', { runId })).code, 'not_found');
});

test('StartProcess over HTTP/1.1: stdout, stderr and the exit code as a Connect server stream', async () => {
  const runId = (await curl('CreateRun', { features: { commands: true } })).runId as string;
  const { messages, end } = await serverStream('StartProcess', {
    runId,
    cmd: 'bash',
    args: ['-c', 'echo out; echo err >&2; exit 7'],
  });
  assert.deepEqual(end, {});
  assert.ok((messages[0].started as { pid: number }).pid > 0, JSON.stringify(messages[0]));
  const of = (k: string) =>
    messages
      .filter((m) => typeof m[k] === 'string')
      .map((m) => Buffer.from(m[k] as string, 'base64').toString())
      .join('');
  assert.equal(of('stdout'), 'out\n');
  assert.equal(of('stderr'), 'err\n');
  assert.deepEqual(messages.at(-1), { end: { exitCode: 7, signal: '', error: '' } });
  await curl('DeleteRun', { runId });
});

test('a PTY session over HTTP/2: bash on a PTY, fed `echo hi` and `exit`', async () => {
  const run = await client.createRun({ features: { commands: true } });
  const events: ProcessEvent[] = [];
  const it = client
    .startProcess({ runId: run.runId, cmd: 'bash', pty: { cols: 80, rows: 24 }, stdin: true })
    [Symbol.asyncIterator]();
  const first = (await it.next()).value as ProcessEvent;
  assert.equal(first.event.case, 'started');
  const pid = first.event.case === 'started' ? first.event.value.pid : 0;
  const rest = (async () => {
    for (let r = await it.next(); !r.done; r = await it.next()) events.push(r.value);
  })();
  await client.resizeProcess({ runId: run.runId, pid, size: { cols: 100, rows: 30 } });
  await client.sendProcessInput({ runId: run.runId, pid, data: Buffer.from('echo hi\n') });
  await client.sendProcessInput({ runId: run.runId, pid, data: Buffer.from('exit\n') });
  await rest;
  assert.match(bytes(events, 'pty'), /hi\r?\n/);
  const end = events.at(-1)?.event;
  assert.equal(end?.case, 'end');
  assert.equal(end?.case === 'end' && end.value.exitCode, 0);
  await client.deleteRun({ runId: run.runId });
});

test('SignalProcess ends a `sleep 100`; leaving its stream had not', async () => {
  const run = await client.createRun({ features: { commands: true } });
  const abort = new AbortController();
  const it = client.startProcess({ runId: run.runId, cmd: 'sleep', args: ['100'] }, { signal: abort.signal });
  const first = (await it[Symbol.asyncIterator]().next()).value as ProcessEvent;
  const pid = first.event.case === 'started' ? first.event.value.pid : 0;
  abort.abort();
  // Still running after its stream ended; followed again, it ends by the signal.
  const listed = await client.listProcesses({ runId: run.runId });
  assert.ok(
    listed.processes.some((p) => p.pid === pid),
    JSON.stringify(listed.processes.map((p) => p.pid)),
  );
  const watched = (async () => {
    const events: ProcessEvent[] = [];
    for await (const e of client.connectProcess({ runId: run.runId, pid })) events.push(e);
    return events;
  })();
  await new Promise((r) => setTimeout(r, 100));
  const began = Date.now();
  await client.signalProcess({ runId: run.runId, pid, signal: ProcessSignal.SIGKILL });
  const end = (await watched).at(-1)?.event;
  assert.equal(end?.case, 'end');
  assert.deepEqual(end?.case === 'end' && [end.value.exitCode, end.value.signal], [-1, 'SIGKILL']);
  assert.ok(Date.now() - began < 10_000);
  await client.deleteRun({ runId: run.runId });
});
