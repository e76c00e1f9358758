import * as net from 'node:net';
import type { Readable, Writable } from 'node:stream';
import type { MessageReader } from 'vscode-jsonrpc/node';
import { FramedMessageReader, FramedMessageWriter } from '../../../../protocol/src/framing';
import { readLine } from '../../../../protocol/src/lines';
import {
  GREETING,
  HANDSHAKE_TIMEOUT_MS,
  MAX_PREAMBLE_LINE,
  nonce,
  proof,
  proofMatches,
} from '../../../../protocol/src/transport';
import type { RunnerStream, Sandbox } from '../../sandbox/provider';

/** One transport to a runner a JSON-RPC connection can run over. */
export interface Channel {
  kind: 'unix' | 'tcp' | 'stdio' | 'stream';
  reader: MessageReader;
  writer: FramedMessageWriter;
  /** Starts the flow of bytes, once the connection listens (the preamble left it paused). */
  resume(): void;
  close(): void;
}

/** How long a runner's socket path may refuse connections before it is taken as closed. */
const REFUSED_GRACE_MS = 1000;

/**
 * Connects to a runner's socket and passes the mutual challenge: the runner proves it holds
 * the run's secret before the gateway proves it does, and the secret itself never crosses.
 */
export async function connectSocket(
  target: { path: string } | { host: string; port: number },
  secret: Buffer,
): Promise<Channel> {
  const open = () =>
    new Promise<net.Socket>((resolve, reject) => {
      const s = 'path' in target ? net.connect(target.path) : net.connect(target.port, target.host);
      s.once('connect', () => {
        s.off('error', reject);
        resolve(s);
      });
      s.once('error', reject);
    });
  // A runner's socket file appears when it binds, a moment before it listens (under gVisor,
  // through the gofer, long enough to be seen): a refusal then is not the runner's answer yet.
  let socket: net.Socket | undefined;
  for (const until = Date.now() + REFUSED_GRACE_MS; !socket; ) {
    socket = await open().catch(async (err: NodeJS.ErrnoException) => {
      if (!('path' in target) || err.code !== 'ECONNREFUSED' || Date.now() > until) throw err;
      await new Promise((r) => setTimeout(r, 10));
      return undefined;
    });
  }
  try {
    socket.setNoDelay(true);
    await challenge(socket, socket, secret);
  } catch (err) {
    socket.destroy();
    throw err;
  }
  socket.on('error', () => undefined);
  return {
    kind: 'path' in target ? 'unix' : 'tcp',
    reader: new FramedMessageReader(socket),
    writer: new FramedMessageWriter(socket),
    resume: () => socket.resume(),
    close: () => socket.destroy(),
  };
}

/**
 * The mutual challenge on an open byte stream: the runner proves it holds the run's secret
 * before the gateway proves it does, and the secret itself never crosses.
 */
async function challenge(readable: Readable, writable: Writable, secret: Buffer): Promise<void> {
  const clientNonce = nonce();
  writable.write(`${GREETING} ${clientNonce}\n`);
  const [runnerNonce, runnerProof] = (await readLine(readable, MAX_PREAMBLE_LINE, HANDSHAKE_TIMEOUT_MS))
    .toString('utf8')
    .split(' ');
  if (!runnerNonce || !runnerProof || !proofMatches(secret, 'runner', clientNonce, runnerNonce, runnerProof)) {
    throw new Error("the socket did not prove it is this run's runner");
  }
  writable.write(`${proof(secret, 'gateway', clientNonce, runnerNonce)}\n`);
  const ok = (await readLine(readable, 16, HANDSHAKE_TIMEOUT_MS)).toString('utf8');
  if (ok !== 'ok') throw new Error('the runner refused the connection');
}

/** A connection over a stream the provider relays to the runner's socket (Kubernetes: an exec). */
export async function connectStream(stream: RunnerStream, secret: Buffer): Promise<Channel> {
  try {
    await challenge(stream.readable, stream.writable, secret);
  } catch (err) {
    stream.close();
    throw err;
  }
  return {
    kind: 'stream',
    reader: new FramedMessageReader(stream.readable),
    writer: new FramedMessageWriter(stream.writable),
    resume: () => stream.readable.resume(),
    close: () => stream.close(),
  };
}

/** The runner's own stdio, the fallback every provider has. */
export async function connectStdio(sandbox: Sandbox): Promise<Channel> {
  const { stdin, stdout } = await sandbox.stdio();
  return {
    kind: 'stdio',
    reader: new FramedMessageReader(stdout),
    writer: new FramedMessageWriter(stdin),
    resume: () => stdout.resume(),
    close: () => undefined,
  };
}
