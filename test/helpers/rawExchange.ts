import assert from 'node:assert/strict';
import type * as net from 'node:net';

/**
 * Sends `send` on a fresh connection that speaks no protocol of ours, and resolves with what came
 * back and whether the peer closed it within `timeoutMs`.
 */
export function rawExchange(
  socket: net.Socket,
  send: string,
  timeoutMs = 8000,
): Promise<{ closed: boolean; got: string }> {
  return new Promise((resolve) => {
    let got = '';
    socket.on('data', (d) => (got += d.toString()));
    socket.on('connect', () => socket.write(send));
    socket.on('error', () => undefined);
    socket.on('close', () => resolve({ closed: true, got }));
    setTimeout(() => (socket.destroy(), resolve({ closed: false, got })), timeoutMs);
  });
}

/**
 * A stranger's tries, each on a connection of its own (`connect`): JSON-RPC without the
 * challenge, a wrong proof, garbage. Every one must be closed with nothing of the run
 * (`ofTheRun`) sent back; a wrong proof is never answered `ok` (the runner proves itself first,
 * so its own line is there, but no session).
 */
export async function assertStrangersRefused(connect: () => net.Socket, ofTheRun: RegExp): Promise<void> {
  const jsonRpc = JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: { callId: 'x', tool: 'read', arguments: { path: 'a.txt' } },
  });
  const attempts = {
    'no secret (JSON-RPC at once)': `Content-Length: ${jsonRpc.length}\r\n\r\n${jsonRpc}`,
    'wrong secret': `tether-runner/1 ${'ab'.repeat(16)}\n${'00'.repeat(32)}\n`,
    garbage: 'x'.repeat(100_000),
  };
  const results = await Promise.all(Object.values(attempts).map((send) => rawExchange(connect(), send)));
  Object.keys(attempts).forEach((name, i) => {
    assert.equal(results[i].closed, true, `${name}: closed`);
    assert.doesNotMatch(results[i].got, ofTheRun, `${name}: got nothing of the run`);
    assert.doesNotMatch(results[i].got, /"result"/, `${name}: got no answer`);
  });
  assert.doesNotMatch(results[1].got, /\nok\n/, 'a wrong proof is never answered ok');
}
