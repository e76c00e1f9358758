import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import type { DebugProtocol } from '@vscode/debugprotocol';
import { encodeMessage, MessageDecoder } from '../../../runner/src/tools/debug/framing';
import { DapClient, DapClosedError, DapRequestError, DapTimeoutError } from '../../../runner/src/tools/debug/dapClient';
import { OutputBuffer } from '../../../runner/src/tools/debug/outputBuffer';
import { ReverseRequests } from '../../../runner/src/tools/debug/reverseRequests';

const event = (seq: number, name: string, body?: unknown): DebugProtocol.Event => ({
  seq,
  type: 'event',
  event: name,
  body,
});

test('framing: messages survive being cut at every byte, and several arrive in one chunk', () => {
  const msgs = [
    event(1, 'output', { output: 'héllo ✓ \r\n\r\n' }),
    event(2, 'stopped', { reason: 'breakpoint', threadId: 1 }),
  ];
  const wire = Buffer.concat(msgs.map(encodeMessage));
  for (let cut = 1; cut < wire.length; cut++) {
    const d = new MessageDecoder();
    const out = [...d.push(wire.subarray(0, cut)), ...d.push(wire.subarray(cut))];
    assert.deepEqual(out, msgs, `cut at ${cut}`);
  }
  assert.deepEqual(new MessageDecoder().push(wire), msgs);
  // Content-Length counts bytes, not characters.
  const json = JSON.stringify(event(1, 'x', { s: 'é' }));
  assert.equal(
    encodeMessage(event(1, 'x', { s: 'é' }))
      .toString('latin1')
      .split('\r\n')[0],
    `Content-Length: ${json.length + 1}`,
  );
});

test('framing: a header without Content-Length, or a runaway header, is an error', () => {
  assert.throws(() => new MessageDecoder().push(Buffer.from('Content-Type: x\r\n\r\n{}')), /without Content-Length/);
  assert.throws(() => new MessageDecoder().push(Buffer.from('Content-Length: -4\r\n\r\n')), /bad Content-Length/);
  assert.throws(() => new MessageDecoder().push(Buffer.alloc(9000, 65)), /no header terminator/);
});

/** A scripted adapter on the other end of two pipes: answers requests with `answer`. */
function fakeAdapter(answer: (r: DebugProtocol.Request, send: (m: DebugProtocol.ProtocolMessage) => void) => void) {
  const toClient = new PassThrough();
  const toAdapter = new PassThrough();
  const decoder = new MessageDecoder();
  const fromClient: DebugProtocol.ProtocolMessage[] = [];
  const send = (m: DebugProtocol.ProtocolMessage) => toClient.write(encodeMessage(m));
  toAdapter.on('data', (chunk: Buffer) => {
    for (const m of decoder.push(chunk)) {
      fromClient.push(m);
      if (m.type === 'request') answer(m as DebugProtocol.Request, send);
    }
  });
  return { toClient, toAdapter, send, fromClient };
}

const respond = (
  r: DebugProtocol.Request,
  body: unknown,
  extra: Partial<DebugProtocol.Response> = {},
): DebugProtocol.Response => ({
  seq: 100 + r.seq,
  type: 'response',
  request_seq: r.seq,
  command: r.command,
  success: true,
  body,
  ...extra,
});

test('client: responses are matched by request_seq even out of order; events reach listeners', async () => {
  const held: DebugProtocol.Request[] = [];
  const a = fakeAdapter((r, send) => {
    held.push(r);
    if (held.length === 2) {
      send(respond(held[1], { threads: [{ id: 2, name: 'second' }] }));
      send(event(1, 'stopped', { reason: 'pause', threadId: 7 }));
      send(respond(held[0], { threads: [{ id: 1, name: 'first' }] }));
    }
  });
  const client = new DapClient(a.toClient, a.toAdapter, async () => undefined);
  const events: string[] = [];
  client.onEvent((e) => events.push(e.event));
  const [first, second] = await Promise.all([
    client.request('threads', undefined, 1000),
    client.request('threads', undefined, 1000),
  ]);
  assert.equal(first.body.threads[0].name, 'first');
  assert.equal(second.body.threads[0].name, 'second');
  assert.deepEqual(events, ['stopped']);
  assert.deepEqual(
    a.fromClient.map((m) => m.seq),
    [1, 2],
  );
});

test("client: a failed request carries the adapter's formatted message; silence times out; a closed stream fails everything", async () => {
  const a = fakeAdapter((r, send) => {
    if (r.command === 'evaluate')
      send(
        respond(
          r,
          { error: { id: 1, format: 'name {name} is not defined', variables: { name: 'zz' } } },
          { success: false, message: 'x' },
        ),
      );
    if (r.command === 'scopes') send(respond(r, undefined, { success: false, message: 'Wrong ID' }));
  });
  const client = new DapClient(a.toClient, a.toAdapter, async () => undefined);
  await assert.rejects(
    client.request('evaluate', { expression: 'zz' }, 1000),
    (e: unknown) => e instanceof DapRequestError && e.message === 'name zz is not defined',
  );
  await assert.rejects(
    client.request('scopes', { frameId: 9 }, 1000),
    (e: unknown) => e instanceof DapRequestError && e.message === 'Wrong ID',
  );
  await assert.rejects(client.request('threads', undefined, 50), DapTimeoutError);
  const pending = client.request('threads', undefined, 5000);
  a.toClient.end();
  await assert.rejects(
    pending,
    (e: unknown) => e instanceof DapClosedError && /closed its connection/.test((e as Error).message),
  );
  await assert.rejects(client.request('threads', undefined, 1000), DapClosedError);
});

test('client: garbage from the adapter closes the connection instead of throwing into the runner', async () => {
  const a = fakeAdapter(() => undefined);
  const client = new DapClient(a.toClient, a.toAdapter, async () => undefined);
  const pending = client.request('threads', undefined, 5000);
  a.toClient.write('Content-Length: 5\r\n\r\n{oops');
  await assert.rejects(pending, /unreadable message/);
});

test('reverse requests: runInTerminal runs the command here with its env and captures output; startDebugging is refused in words', async () => {
  const output = new OutputBuffer(1000);
  const reverse = new ReverseRequests(output);
  let answered: (r: DebugProtocol.Response) => void;
  const responses = new Promise<DebugProtocol.Response[]>((resolve) => {
    const got: DebugProtocol.Response[] = [];
    answered = (r) => {
      got.push(r);
      if (got.length === 3) resolve(got);
    };
  });
  const a = fakeAdapter(() => undefined);
  a.toAdapter.on('data', () => undefined);
  const decoder = new MessageDecoder();
  a.toAdapter.on('data', (chunk: Buffer) =>
    decoder.push(chunk).forEach((m) => m.type === 'response' && answered(m as DebugProtocol.Response)),
  );
  new DapClient(a.toClient, a.toAdapter, reverse.handler);
  a.send({
    seq: 1,
    type: 'request',
    command: 'runInTerminal',
    arguments: { cwd: '/tmp', args: ['sh', '-c', 'echo "hi $GREETING from $(pwd)"'], env: { GREETING: 'there' } },
  } as DebugProtocol.Request);
  a.send({
    seq: 2,
    type: 'request',
    command: 'startDebugging',
    arguments: { request: 'launch', configuration: {} },
  } as DebugProtocol.Request);
  a.send({
    seq: 3,
    type: 'request',
    command: 'runInTerminal',
    arguments: { cwd: '/tmp', args: ['/no/such/binary'] },
  } as DebugProtocol.Request);
  const byReq = new Map((await responses).map((r) => [r.request_seq, r]));
  assert.equal(byReq.get(1)!.success, true);
  assert.ok((byReq.get(1)!.body as { processId: number }).processId > 0);
  assert.equal(byReq.get(2)!.success, false);
  assert.match(byReq.get(2)!.message!, /one debug session per conversation.*startDebugging refused/);
  assert.equal(byReq.get(3)!.success, false);
  assert.match(byReq.get(3)!.message!, /could not start \/no\/such\/binary/);
  for (let i = 0; i < 50 && !output.tail(100).includes('hi'); i++) await new Promise((r) => setTimeout(r, 20));
  assert.equal(output.tail(100), 'hi there from /tmp\n');
  reverse.killAll();
});
