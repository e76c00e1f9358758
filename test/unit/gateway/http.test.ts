import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import * as net from 'node:net';
import { create } from '@bufbuild/protobuf';
import { Code, ConnectError, createClient, type Client, type Interceptor } from '@connectrpc/connect';
import { createConnectTransport, Http2SessionManager } from '@connectrpc/connect-node';
import * as grpc from '@grpc/grpc-js';
import {
  CallToolInputSchema,
  Gateway,
  ProcessSignal,
  PutFilesRequestSchema,
  type CallToolInput,
  type CallToolOutput,
  type ProcessEvent,
} from '@tether/contract';
import { resultText, tarOf, untar } from '../../../clients/typescript/src';
import type { ProcessEndPayload, ProcessInfo, ProcessStartParams } from '../../../protocol/src/process';
import { AskRequest } from '../../../protocol/src/calls';
import { CommandRequest, RunEventNotification, type CommandParams } from '../../../protocol/src/run';
import { CallToolRequest, type CallToolParams } from '../../../protocol/src/tools';
import type { MessageConnection } from 'vscode-jsonrpc/node';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { answersInitialize, FakeProvider, type RunnerScript } from './fakeSandbox';

// tether.v1.Gateway on the HTTP listener (Connect, HTTP/1.1 and HTTP/2 on one port), against a
// gateway whose runner is an in-process fake: curl, fetch, connect-node's client, and the gRPC
// port beside it.

const MAX_MESSAGE = 64 * 1024;

/** The fake runner's processes: a start prints to both streams; `sleep` runs until signalled, `cat` echoes its input. */
function processFamily(conn: MessageConnection): (p: CommandParams) => unknown {
  let next = 100;
  const running = new Map<number, ProcessInfo>();
  const event = (kind: string, payload: unknown) =>
    void conn.sendNotification(RunEventNotification.type, { kind, payload });
  const output = (pid: number, stream: string, text: string) =>
    event('process.output', { pid, stream, data: Buffer.from(text).toString('base64') });
  const end = (payload: ProcessEndPayload) => {
    running.delete(payload.pid);
    event('process.end', payload);
  };
  return (p) => {
    const payload = p.payload as Record<string, unknown>;
    const pid = payload.pid as number;
    switch (p.command) {
      case 'start': {
        const params = payload as unknown as ProcessStartParams;
        const id = next++;
        running.set(id, {
          pid: id,
          cmd: params.cmd,
          args: params.args,
          cwd: params.cwd ?? '/workspace',
          env: params.env ?? {},
          tag: params.tag,
          pty: !!params.pty,
        });
        setTimeout(() => {
          if (params.cmd === 'sleep' || params.cmd === 'cat') return;
          output(id, 'stdout', `out ${JSON.stringify([params.cmd, ...params.args])}\n`);
          output(id, 'stderr', 'err\n');
          end({ pid: id, exitCode: 7 });
        }, 5);
        return { ok: true, pid: id };
      }
      case 'list':
        return { processes: [...running.values()] };
      case 'input':
        if (!running.has(pid)) return { ok: false, code: 'not_found', message: `no process ${pid}` };
        output(pid, 'stdout', Buffer.from(payload.data as string, 'base64').toString());
        return { ok: true };
      case 'closeStdin':
        if (!running.has(pid)) return { ok: false, code: 'not_found', message: `no process ${pid}` };
        end({ pid, exitCode: 0 });
        return { ok: true };
      case 'signal':
        if (!running.has(pid)) return { ok: false, code: 'not_found', message: `no process ${pid}` };
        end({ pid, exitCode: -1, signal: payload.signal as string });
        return { ok: true };
      case 'resize':
        return running.has(pid) ? { ok: true } : { ok: false, code: 'not_found', message: `no process ${pid}` };
      default:
        throw new Error(`no command ${p.command}`);
    }
  };
}

/** `echo` answers its arguments; with `ask` it asks a card and answers with the outcome. */
const script: RunnerScript = (conn, sb) => {
  answersInitialize(conn, sb);
  conn.onRequest(CallToolRequest.type, async (p: CallToolParams) => {
    if (p.arguments.ask) {
      const outcome = await conn.sendRequest(AskRequest.type, {
        callId: p.callId,
        card: {
          question: 'which?',
          options: [{ label: 'A' }, { label: 'B' }],
          allowFreeText: false,
          multiSelect: false,
        },
      });
      const why = outcome.kind === 'unavailable' ? `: ${outcome.reason}` : '';
      const picked = outcome.kind === 'answered' ? ` ${outcome.selected.join(',')}` : '';
      return { content: [{ type: 'text' as const, text: `asked: ${outcome.kind}${picked}${why}` }] };
    }
    return { content: [{ type: 'text' as const, text: `echo ${JSON.stringify(p.arguments)}` }] };
  });
  const processes = processFamily(conn);
  conn.onRequest(CommandRequest.type, (p: CommandParams) => {
    if (p.family === 'process') return processes(p);
    if (p.family === 'workspace') return {};
    throw new Error(`no command ${p.family}/${p.command}`);
  });
};

let t: TestGateway;
let base: string;
let h2: Http2SessionManager;
let alice: Client<typeof Gateway>;
let aliceH1: Client<typeof Gateway>;

const bearer =
  (token: string): Interceptor =>
  (next) =>
  (req) => {
    req.header.set('authorization', `Bearer ${token}`);
    return next(req);
  };

const json = (token?: string | null) => ({
  'content-type': 'application/json',
  ...(token ? { authorization: `Bearer ${token}` } : {}),
});

async function post(method: string, body: unknown, token: string | null = 'token-alice') {
  const res = await fetch(`${base}/tether.v1.Gateway/${method}`, {
    method: 'POST',
    headers: json(token),
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown>, headers: res.headers };
}

function curl(args: string[]): Promise<{ code: number; version: string; body: string }> {
  return new Promise((resolve, reject) =>
    execFile('curl', ['-sS', '-w', '\n%{http_code} %{http_version}', ...args], (err, out) => {
      if (err) return reject(err);
      const at = out.lastIndexOf('\n');
      const [code, version] = out.slice(at + 1).split(' ');
      resolve({ code: Number(code), version, body: out.slice(0, at) });
    }),
  );
}

/** One Connect stream message: flags, big-endian length, the JSON. */
function envelope(msg: unknown, flags = 0): Buffer {
  const data = Buffer.from(JSON.stringify(msg));
  const head = Buffer.alloc(5);
  head.writeUInt8(flags, 0);
  head.writeUInt32BE(data.length, 1);
  return Buffer.concat([head, data]);
}

/** A Connect server stream read over HTTP/1.1 with fetch: its messages, then its end-of-stream message. */
async function serverStream(method: string, req: unknown, token = 'token-alice') {
  const res = await fetch(`${base}/tether.v1.Gateway/${method}`, {
    method: 'POST',
    headers: { 'content-type': 'application/connect+json', authorization: `Bearer ${token}` },
    body: envelope(req),
  });
  assert.equal(res.status, 200);
  const buf = Buffer.from(await res.arrayBuffer());
  const messages: Record<string, unknown>[] = [];
  let end: Record<string, unknown> | undefined;
  for (let i = 0; i < buf.length; ) {
    const flags = buf.readUInt8(i);
    const len = buf.readUInt32BE(i + 1);
    const body = JSON.parse(buf.subarray(i + 5, i + 5 + len).toString()) as Record<string, unknown>;
    if (flags & 0x02) end = body;
    else messages.push(body);
    i += 5 + len;
  }
  return { messages, end };
}

async function connectCode(p: Promise<unknown>): Promise<Code> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err).code;
  }
  assert.fail('the call succeeded');
}

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

const text = (events: ProcessEvent[], kind: 'stdout' | 'stderr') =>
  events
    .filter((e) => e.event.case === kind)
    .map((e) => Buffer.from(e.event.value as Uint8Array).toString())
    .join('');

before(async () => {
  t = await startTestGateway(
    {
      http: { listen: '127.0.0.1:0' },
      maxMessageBytes: MAX_MESSAGE,
      metrics: { listen: '127.0.0.1:0' },
    },
    new FakeProvider(script),
  );
  base = `http://${t.gateway.httpAddress}`;
  h2 = new Http2SessionManager(base);
  alice = createClient(
    Gateway,
    createConnectTransport({
      baseUrl: base,
      httpVersion: '2',
      sessionManager: h2,
      interceptors: [bearer('token-alice')],
    }),
  );
  aliceH1 = createClient(
    Gateway,
    createConnectTransport({
      baseUrl: base,
      httpVersion: '1.1',
      useBinaryFormat: true,
      interceptors: [bearer('token-alice')],
    }),
  );
});

after(async () => {
  h2.abort();
  await t.close();
});

describe('HTTP/1.1 with fetch and curl', () => {
  test('create, get, list, InvokeTool and delete a run as plain JSON', async () => {
    const created = await post('CreateRun', { features: { commands: true }, labels: { via: 'fetch' } });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    assert.equal(created.body.state, 'RUN_STATE_READY');
    const runId = created.body.runId as string;
    assert.deepEqual((created.body.features as Record<string, unknown>).commands, true);

    const got = await post('GetRun', { runId });
    assert.equal(got.body.runId, runId);
    assert.deepEqual(got.body.labels, { via: 'fetch' });
    const listed = await post('ListRuns', {});
    assert.ok((listed.body.runs as { runId: string }[]).some((r) => r.runId === runId));

    const invoked = await post('InvokeTool', { runId, tool: 'echo', argumentsJson: '{"x":1}' });
    assert.equal(invoked.status, 200, JSON.stringify(invoked.body));
    assert.deepEqual(invoked.body.content, [{ text: 'echo {"x":1}' }]);
    // Every field is in the answer, defaults too.
    assert.equal(invoked.body.isError, false);

    const deleted = await post('DeleteRun', { runId });
    assert.equal(deleted.status, 200);
    assert.deepEqual(deleted.body, {});
    const gone = await post('GetRun', { runId });
    assert.equal(gone.status, 404);
    assert.equal(gone.body.code, 'not_found');
  });

  test('curl over HTTP/1.1 and over HTTP/2 with prior knowledge', async () => {
    const headers = ['-H', 'authorization: Bearer token-alice', '-H', 'content-type: application/json'];
    const created = await curl([
      ...headers,
      '-d',
      '{"features":{"commands":true}}',
      `${base}/tether.v1.Gateway/CreateRun`,
    ]);
    assert.equal(created.code, 200, created.body);
    assert.equal(created.version, '1.1');
    const runId = (JSON.parse(created.body) as { runId: string }).runId;
    const call = JSON.stringify({ runId, tool: 'echo', argumentsJson: '{"via":"curl"}' });
    const viaH2 = await curl([
      '--http2-prior-knowledge',
      ...headers,
      '-d',
      call,
      `${base}/tether.v1.Gateway/InvokeTool`,
    ]);
    assert.equal(viaH2.code, 200, viaH2.body);
    assert.equal(viaH2.version, '2');
    assert.equal(resultTextOf(viaH2.body), 'echo {"via":"curl"}');
    // `--http2` over cleartext asks for an upgrade, which is not taken: HTTP/1.1 answers.
    const upgrade = await curl(['--http2', ...headers, '-d', call, `${base}/tether.v1.Gateway/InvokeTool`]);
    assert.equal(upgrade.code, 200, upgrade.body);
    assert.equal(resultTextOf(upgrade.body), 'echo {"via":"curl"}');
    const missing = await curl([
      '-H',
      'content-type: application/json',
      '-d',
      '{}',
      `${base}/tether.v1.Gateway/ListRuns`,
    ]);
    assert.equal(missing.code, 401);
    assert.equal((JSON.parse(missing.body) as { code: string }).code, 'unauthenticated');
  });

  test('a missing or invalid token is 401 with the Connect error, and counted', async () => {
    const none = await post('ListRuns', {}, null);
    assert.equal(none.status, 401);
    assert.equal(none.body.code, 'unauthenticated');
    assert.match(none.body.message as string, /missing bearer token/);
    const wrong = await post('ListRuns', {}, 'not-a-token');
    assert.equal(wrong.status, 401);
    assert.deepEqual(wrong.body, { code: 'unauthenticated', message: 'invalid token' });
    assert.ok((await counter('tether_auth_failures_total{method="ListRuns"}')) >= 2);
    assert.ok((await counter('tether_grpc_requests_total{method="ListRuns",code="UNAUTHENTICATED"}')) >= 2);
  });

  test("another tenant's run is not_found, word for word as a run that does not exist", async () => {
    const runId = (await post('CreateRun', {})).body.runId as string;
    const theirs = await post('GetRun', { runId }, 'token-bob');
    const none = await post('GetRun', { runId: 'run-none' }, 'token-bob');
    assert.equal(theirs.status, 404);
    assert.equal(theirs.body.code, 'not_found');
    assert.equal(
      (theirs.body.message as string).replace(runId, 'ID'),
      (none.body.message as string).replace('run-none', 'ID'),
    );
    const call = await post('InvokeTool', { runId, tool: 'echo', argumentsJson: '{}' }, 'token-bob');
    assert.equal(call.body.code, 'not_found');
    assert.equal((await post('DeleteRun', { runId }, 'token-bob')).body.code, 'not_found');
    assert.deepEqual((await post('ListRuns', {}, 'token-bob')).body.runs, []);
  });

  test('a body over the message limit is resource_exhausted; malformed JSON is invalid_argument', async () => {
    const big = await post('InvokeTool', { runId: 'x', tool: 'echo', argumentsJson: 'x'.repeat(MAX_MESSAGE + 1) });
    assert.equal(big.status, 429);
    assert.equal(big.body.code, 'resource_exhausted');
    const bad = await post('ListRuns', '{"runs": ');
    assert.equal(bad.status, 400);
    assert.equal(bad.body.code, 'invalid_argument');
    // Unknown fields are ignored (a newer client's), so a misspelt field reads as unset.
    const misspelt = await post('GetRun', { runIdd: 'x' });
    assert.deepEqual(misspelt.body, { code: 'not_found', message: 'run  not found' });
  });

  test('an unknown path or method is 404 JSON', async () => {
    const res = await fetch(`${base}/nothing/here`, { method: 'POST', headers: json('token-alice'), body: '{}' });
    assert.equal(res.status, 404);
    assert.equal(((await res.json()) as { code: string }).code, 'not_found');
    const method = await post('NoSuchMethod', {});
    assert.equal(method.status, 404);
    assert.equal(method.body.code, 'not_found');
  });

  test('InvokeTool: a card fails closed at once, as for a client that half-closed', async () => {
    const runId = (await post('CreateRun', { features: { questions: { enabled: true, targetSpace: 's' } } })).body
      .runId as string;
    const began = Date.now();
    const asked = await post('InvokeTool', {
      runId,
      tool: 'echo',
      argumentsJson: '{"ask":true}',
      acceptsQuestions: true,
    });
    assert.equal(asked.status, 200, JSON.stringify(asked.body));
    assert.match(resultTextOf(JSON.stringify(asked.body)), /^asked: unavailable: InvokeTool answers once/);
    assert.ok(Date.now() - began < 2000, 'nothing waited for an answer');
  });

  test('a server stream over HTTP/1.1: StartProcess read as enveloped JSON', async () => {
    const runId = (await post('CreateRun', { features: { commands: true } })).body.runId as string;
    const { messages, end } = await serverStream('StartProcess', { runId, cmd: 'echo hi; exit 7', shell: true });
    assert.deepEqual(end, {});
    assert.ok((messages[0].started as { pid: number }).pid > 0);
    const stdout = messages.filter((m) => m.stdout).map((m) => Buffer.from(m.stdout as string, 'base64').toString());
    // `shell` runs the command line under bash -l -c.
    assert.deepEqual(stdout, ['out ["/bin/bash","-l","-c","echo hi; exit 7"]\n']);
    assert.deepEqual(messages.at(-1), { end: { exitCode: 7, signal: '', error: '' } });
    const refused = await serverStream('StartProcess', { runId: 'run-none', cmd: 'true' });
    assert.deepEqual(refused.messages, []);
    assert.equal((refused.end as { error: { code: string } }).error.code, 'not_found');
  });

  test('a run without features.commands runs no processes', async () => {
    const runId = (await post('CreateRun', {})).body.runId as string;
    const r = await post('ListProcesses', { runId });
    assert.equal(r.body.code, 'failed_precondition');
  });

  test("connect-node's client over HTTP/1.1 (binary): unary and a server stream", async () => {
    const run = await aliceH1.createRun({});
    const out = await aliceH1.invokeTool({ runId: run.runId, tool: 'echo', argumentsJson: '{"b":true}' });
    assert.equal(resultText(out), 'echo {"b":true}');
    const tar = Buffer.concat((await collect(aliceH1.getFiles({ runId: run.runId }))).map((m) => m.chunk));
    assert.equal(tar.length, 0);
  });
});

describe('HTTP/2 with the connect-node client', () => {
  test('runs, InvokeTool and the process RPCs', async () => {
    const run = await alice.createRun({ features: { commands: true } });
    assert.equal((await alice.getRun({ runId: run.runId })).runId, run.runId);
    const out = await alice.invokeTool({ runId: run.runId, tool: 'echo', argumentsJson: '{}' });
    assert.equal(resultText(out), 'echo {}');

    const events = await collect(alice.startProcess({ runId: run.runId, cmd: 'bash', args: ['-c', 'exit 7'] }));
    assert.equal(events[0].event.case, 'started');
    assert.equal(text(events, 'stdout'), 'out ["bash","-c","exit 7"]\n');
    assert.equal(text(events, 'stderr'), 'err\n');
    const end = events.at(-1)!.event;
    assert.equal(end.case === 'end' && end.value.exitCode, 7);

    // A long one: followed, fed, listed, resized, signalled.
    const stream = alice.startProcess({ runId: run.runId, cmd: 'cat', stdin: true, tag: 't1' })[Symbol.asyncIterator]();
    const started = (await stream.next()).value as ProcessEvent;
    const pid = started.event.case === 'started' ? started.event.value.pid : 0;
    const listed = await alice.listProcesses({ runId: run.runId });
    assert.deepEqual(
      listed.processes.map((p) => [p.pid, p.cmd, p.tag]),
      [[pid, 'cat', 't1']],
    );
    await alice.sendProcessInput({ runId: run.runId, pid, data: Buffer.from('hi\n') });
    const echoed = (await stream.next()).value as ProcessEvent;
    assert.equal(echoed.event.case === 'stdout' && Buffer.from(echoed.event.value).toString(), 'hi\n');
    await alice.resizeProcess({ runId: run.runId, pid, size: { cols: 80, rows: 24 } });
    assert.equal(
      await connectCode(alice.signalProcess({ runId: run.runId, pid, signal: ProcessSignal.UNSPECIFIED })),
      Code.InvalidArgument,
    );
    // A second watcher of the same process.
    const watcher = collect(alice.connectProcess({ runId: run.runId, pid }));
    await new Promise((r) => setTimeout(r, 50));
    await alice.signalProcess({ runId: run.runId, pid, signal: ProcessSignal.SIGKILL });
    const last = (await stream.next()).value as ProcessEvent;
    assert.deepEqual(last.event.case === 'end' && [last.event.value.exitCode, last.event.value.signal], [
      -1,
      'SIGKILL',
    ]);
    assert.equal((await stream.next()).done, true);
    const watched = await watcher;
    assert.equal(watched.at(-1)?.event.case, 'end');
    assert.equal(await connectCode(alice.closeProcessInput({ runId: run.runId, pid })), Code.NotFound);
    assert.equal(await connectCode(collect(alice.connectProcess({ runId: run.runId, pid }))), Code.NotFound);
  });

  test('a stream the client leaves ends the watch, not the process', async () => {
    const run = await alice.createRun({ features: { commands: true } });
    const abort = new AbortController();
    const stream = alice.startProcess({ runId: run.runId, cmd: 'sleep' }, { signal: abort.signal });
    const first = (await stream[Symbol.asyncIterator]().next()).value as ProcessEvent;
    const pid = first.event.case === 'started' ? first.event.value.pid : 0;
    abort.abort();
    await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(
      (await alice.listProcesses({ runId: run.runId })).processes.map((p) => p.pid),
      [pid],
    );
    await alice.signalProcess({ runId: run.runId, pid, signal: ProcessSignal.SIGTERM });
    assert.deepEqual((await alice.listProcesses({ runId: run.runId })).processes, []);
  });

  test('CallTool and Calls (bidirectional) and PutFiles (client stream)', async () => {
    const run = await alice.createRun({ features: { questions: { enabled: true, targetSpace: 's' } } });
    // A card on CallTool is shown and answered on the same stream.
    let answer!: (m: CallToolInput) => void;
    const answered = new Promise<CallToolInput>((r) => (answer = r));
    async function* inputs() {
      yield create(CallToolInputSchema, {
        msg: {
          case: 'start',
          value: { runId: run.runId, tool: 'echo', argumentsJson: '{"ask":true}', acceptsQuestions: true },
        },
      });
      yield await answered;
    }
    const outputs: CallToolOutput[] = [];
    for await (const o of alice.callTool(inputs())) {
      outputs.push(o);
      if (o.msg.case === 'question')
        answer(
          create(CallToolInputSchema, {
            msg: { case: 'answer', value: { questionId: o.msg.value.id, selected: [2] } },
          }),
        );
    }
    assert.deepEqual(
      outputs.map((o) => o.msg.case),
      ['question', 'result'],
    );
    const result = outputs[1].msg.value as Parameters<typeof resultText>[0];
    assert.equal(resultText(result), 'asked: answered 2');

    const calls = await collect(
      alice.calls(
        (async function* () {
          for (const id of ['a', 'b'])
            yield {
              callId: id,
              input: {
                msg: {
                  case: 'start' as const,
                  value: { runId: run.runId, tool: 'echo', argumentsJson: `{"id":"${id}"}` },
                },
              },
            };
        })(),
      ),
    );
    assert.deepEqual(
      calls
        .map((c) => [
          c.callId,
          c.msg.case === 'output' && c.msg.value.msg.case === 'result' ? resultText(c.msg.value.msg.value) : '',
        ])
        .sort(),
      [
        ['a', 'echo {"id":"a"}'],
        ['b', 'echo {"id":"b"}'],
      ],
    );

    const tar = await tarOf({ 'x.txt': 'x' });
    const put = await alice.putFiles(
      (async function* () {
        yield create(PutFilesRequestSchema, { msg: { case: 'header', value: { runId: run.runId, path: '' } } });
        yield create(PutFilesRequestSchema, { msg: { case: 'chunk', value: tar } });
      })(),
    );
    assert.equal(put.filesWritten, 1);
    assert.equal(
      await connectCode(
        alice.putFiles(
          (async function* () {
            yield create(PutFilesRequestSchema, { msg: { case: 'header', value: { runId: 'run-none', path: '' } } });
          })(),
        ),
      ),
      Code.NotFound,
    );
  });

  test('the rate limit refuses InvokeTool as it does CallTool, with the retry hint', async () => {
    const g = await startTestGateway(
      { http: { listen: '127.0.0.1:0' }, tenancy: { default: { callTool: { perSecond: 0.001, burst: 1 } } } },
      new FakeProvider(script),
    );
    try {
      const at = `http://${g.gateway.httpAddress}/tether.v1.Gateway`;
      const call = (runId: string) =>
        fetch(`${at}/InvokeTool`, {
          method: 'POST',
          headers: json('token-alice'),
          body: JSON.stringify({ runId, tool: 'echo', argumentsJson: '{}' }),
        });
      const run = (await (
        await fetch(`${at}/CreateRun`, { method: 'POST', headers: json('token-alice'), body: '{}' })
      ).json()) as {
        runId: string;
      };
      assert.equal((await call(run.runId)).status, 200);
      const refused = await call(run.runId);
      assert.equal(refused.status, 429);
      assert.ok(Number(refused.headers.get('retry-after-ms')) > 0);
      const body = (await refused.json()) as { code: string; details: { type: string }[] };
      assert.equal(body.code, 'resource_exhausted');
      assert.deepEqual(
        body.details.map((d) => d.type),
        ['google.rpc.RetryInfo'],
      );
    } finally {
      await g.close();
    }
  });
});

describe('the listener', () => {
  test('an HTTP/2 preface split over several packets is still HTTP/2', async () => {
    const socket = net.connect(t.gateway.http!.port, '127.0.0.1');
    await new Promise((r) => socket.once('connect', r));
    const got = new Promise<Buffer>((resolve) => socket.once('data', resolve));
    socket.write('PRI * HT');
    await new Promise((r) => setTimeout(r, 30));
    socket.write('TP/2.0\r\n\r\nSM\r\n\r\n');
    // An empty SETTINGS frame: length 0, type 4, no flags, stream 0.
    socket.write(Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]));
    const frame = await got;
    assert.equal(frame.readUInt8(3), 4, 'the server answers with its SETTINGS');
    socket.destroy();
  });

  test('HTTP/1.1 keep-alive: many requests, and the gRPC port beside it unchanged', async () => {
    for (let i = 0; i < 20; i++) assert.equal((await post('ListRuns', {})).status, 200);
    const run = await t.alice.createRun({ features: { commands: true } });
    const out = await t.alice.callTool(run.runId, 'echo', { grpc: 1 });
    assert.equal(out.text, 'echo {"grpc":1}');
    const once = await t.alice.invokeTool(run.runId, 'echo', { unary: 1 });
    assert.equal(once.text, 'echo {"unary":1}');
    const events: ProcessEvent[] = [];
    for await (const e of t.alice.startProcess({ runId: run.runId, cmd: 'true' })) events.push(e);
    assert.deepEqual(
      events.map((e) => e.event.case),
      ['started', 'stdout', 'stderr', 'end'],
    );
    await assert.rejects(
      t.bob.invokeTool(run.runId, 'echo'),
      (e: { code: number }) => e.code === grpc.status.NOT_FOUND,
    );
    await assert.rejects(
      (async () => {
        for await (const _ of t.bob.startProcess({ runId: run.runId, cmd: 'true' })) {
          // nothing arrives
        }
      })(),
      (e: { code: number }) => e.code === grpc.status.NOT_FOUND,
    );
    // The same RPCs are counted whichever edge served them.
    const before = await counter('tether_grpc_requests_total{method="InvokeTool",code="OK"}');
    await post('InvokeTool', { runId: run.runId, tool: 'echo', argumentsJson: '{}' });
    await t.alice.invokeTool(run.runId, 'echo');
    assert.equal(await counter('tether_grpc_requests_total{method="InvokeTool",code="OK"}'), before + 2);
    const files = await untar(await t.alice.getFiles(run.runId));
    assert.equal(files.size, 0);
  });
});

/** A series' value in the gateway's /metrics text (0 when absent). */
async function counter(series: string): Promise<number> {
  const line = (await t.gateway.telemetry.metrics!.text()).split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

function resultTextOf(body: string): string {
  return ((JSON.parse(body) as { content: { text?: string }[] }).content ?? []).map((c) => c.text ?? '').join('');
}
