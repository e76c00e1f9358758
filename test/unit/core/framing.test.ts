import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { createMessageConnection, RequestType } from 'vscode-jsonrpc/node';
import { FramedMessageReader, FramedMessageWriter } from '../../../protocol/src/framing';

const frame = (body: string, headers = '') =>
  Buffer.from(`Content-Length: ${Buffer.byteLength(body)}\r\n${headers}\r\n${body}`, 'utf8');

function reading() {
  const input = new PassThrough();
  const reader = new FramedMessageReader(input);
  // What arrived, as the JSON it was: every test message has a method, some params.
  const got: { method: string; params?: unknown }[] = [];
  const errors: string[] = [];
  reader.onError((e) => errors.push(e.message));
  reader.listen((m) => got.push(m as unknown as { method: string; params?: unknown }));
  return { input, got, errors, reader };
}

const tick = () => new Promise((r) => setImmediate(r));

test('messages are read whole however the bytes are cut: one per chunk, several per chunk, a byte at a time', async () => {
  const { input, got, errors } = reading();
  const a = frame(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'a', params: { text: 'é ✓ 🙂' } }));
  const b = frame(
    JSON.stringify({ jsonrpc: '2.0', method: 'b' }),
    'Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n',
  );
  input.write(a);
  input.write(Buffer.concat([b, a]));
  // A byte at a time cuts the header, the body and a multi-byte character apart.
  for (const byte of Buffer.concat([b, a])) input.write(Buffer.from([byte]));
  await tick();
  assert.deepEqual(errors, []);
  assert.deepEqual(
    got.map((m) => m.method),
    ['a', 'b', 'a', 'b', 'a'],
  );
  assert.deepEqual(got[0].params, { text: 'é ✓ 🙂' });
});

test('a large body arriving in many chunks is one message', async () => {
  const { input, got } = reading();
  const big = 'x'.repeat(3 * 1024 * 1024);
  const f = frame(JSON.stringify({ jsonrpc: '2.0', method: 'big', params: { big } }));
  for (let i = 0; i < f.length; i += 65536) input.write(f.subarray(i, i + 65536));
  await tick();
  assert.equal(got.length, 1);
  assert.equal((got[0].params as { big: string }).big.length, big.length);
});

test('a bad header or a body that is not JSON is reported; the messages after it still arrive', async () => {
  const { input, got, errors } = reading();
  input.write(Buffer.from('Content-Type: text/plain\r\n\r\n'));
  input.write(Buffer.from('Content-Length: 3\r\n\r\n{x}'));
  input.write(Buffer.from('no colon here\r\n\r\n'));
  input.write(frame(JSON.stringify({ jsonrpc: '2.0', method: 'after' })));
  await tick();
  assert.equal(errors.length, 3);
  assert.match(errors[0], /Content-Length/);
  assert.match(errors[2], /separate key and value/);
  assert.deepEqual(
    got.map((m) => m.method),
    ['after'],
  );
});

test('the stream closing closes the reader', async () => {
  const { input, reader } = reading();
  let closed = false;
  reader.onClose(() => {
    closed = true;
  });
  input.destroy();
  await new Promise((r) => setTimeout(r, 10));
  assert.ok(closed);
});

test('a connection over the framed reader and writer serves requests both ways, in order', async () => {
  const up = new PassThrough();
  const down = new PassThrough();
  const echo = new RequestType<{ n: number }, { n: number }, void>('echo');
  const server = createMessageConnection(new FramedMessageReader(up), new FramedMessageWriter(down));
  server.onRequest(echo, (p) => ({ n: p.n * 2 }));
  server.listen();
  const client = createMessageConnection(new FramedMessageReader(down), new FramedMessageWriter(up));
  client.listen();
  const answers = await Promise.all(Array.from({ length: 50 }, (_, n) => client.sendRequest(echo, { n })));
  assert.deepEqual(
    answers.map((a) => a.n),
    Array.from({ length: 50 }, (_, n) => n * 2),
  );
  client.dispose();
  server.dispose();
});
