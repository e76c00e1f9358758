import type { Socket } from 'node:net';
import { readLine } from '../../../protocol/src/lines';
import {
  GREETING,
  HANDSHAKE_TIMEOUT_MS,
  MAX_PREAMBLE_LINE,
  isNonce,
  nonce,
  proof,
  proofMatches,
} from '../../../protocol/src/transport';

/**
 * The runner's side of the mutual challenge (see protocol/src/transport.ts). Resolves when the
 * peer proved it holds the secret; rejects otherwise, and the caller closes the socket.
 */
export async function acceptHandshake(socket: Socket, secret: Buffer): Promise<void> {
  const deadline = Date.now() + HANDSHAKE_TIMEOUT_MS;
  const left = () => Math.max(1, deadline - Date.now());
  const greeting = (await readLine(socket, 128, left())).toString('utf8').split(' ');
  if (greeting.length !== 2 || greeting[0] !== GREETING || !isNonce(greeting[1]))
    throw new Error('not a tether greeting');
  const clientNonce = greeting[1];
  const runnerNonce = nonce();
  socket.write(`${runnerNonce} ${proof(secret, 'runner', clientNonce, runnerNonce)}\n`);
  const answer = (await readLine(socket, MAX_PREAMBLE_LINE, left())).toString('utf8');
  if (!proofMatches(secret, 'gateway', clientNonce, runnerNonce, answer)) throw new Error('wrong proof');
  socket.write('ok\n');
}
