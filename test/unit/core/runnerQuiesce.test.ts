import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { createMessageConnection } from 'vscode-jsonrpc/node';
import { connectSocket } from '../../../gateway/src/runs/connection/channel';
import { PingRequest, QuiesceRequest } from '../../../protocol/src/transport';
import { Listeners } from '../../../runner/src/connections/listeners';
import { Sessions } from '../../../runner/src/connections/sessions';

/** A gateway's connection to the runner's Unix socket, past the challenge. */
async function dial(file: string, secret: Buffer) {
  const channel = await connectSocket({ path: file }, secret);
  const c = createMessageConnection(channel.reader, channel.writer);
  const closed = new Promise<void>((resolve) => c.onClose(() => resolve()));
  c.listen();
  channel.resume();
  return { c, closed };
}

test('quiesce: the runner answers, then closes every socket connection and its listener; it listens again when woken', async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-quiesce-'));
  const file = path.join(dir, 'runner.sock');
  const secret = Buffer.alloc(32, 7);
  const sessions = new Sessions('test', async () => undefined);
  const listeners = new Listeners(secret, sessions, () => undefined);
  sessions.quiesce = { closing: () => listeners.connections, close: () => listeners.quiesce() };
  const hello = await listeners.listen({ unix: file });
  assert.equal(hello.listening.unix, file);

  const a = await dial(file, secret);
  const b = await dial(file, secret);
  assert.equal((await a.c.sendRequest(PingRequest.type)).connections, 2);
  assert.deepEqual(await a.c.sendRequest(QuiesceRequest.type), { closing: 2 }, 'the answer arrives first');
  await Promise.all([a.closed, b.closed]);
  for (let i = 0; i < 100 && existsSync(file); i++) await new Promise((r) => setTimeout(r, 10));
  assert.equal(existsSync(file), false, 'the socket file is gone: nothing is connected to the host');
  assert.equal(listeners.connections, 0);
  await assert.rejects(connectSocket({ path: file }, secret), /ENOENT|ECONNREFUSED/);

  const again = await listeners.reopen();
  assert.equal(again.listening.unix, file);
  const c = await dial(file, secret);
  assert.equal((await c.c.sendRequest(PingRequest.type)).connections, 1, 'a new connection after the wake');
  assert.deepEqual((await listeners.reopen()).errors, ['already listening'], 'a second wake changes nothing');
  c.c.dispose();
  await listeners.quiesce();
});
