import { promises as fs } from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { FramedMessageReader, FramedMessageWriter } from '../../../protocol/src/framing';
import type { BootLine, HelloLine } from '../../../protocol/src/transport';
import { logger } from '../log';
import { acceptHandshake } from './handshake';
import type { Sessions } from './sessions';

/**
 * Opens the listeners the boot line asks for. Node opens every descriptor close-on-exec, so
 * the processes the tools spawn (language servers, kernels, adapters) inherit no listener.
 * `onAuthenticated` is told each time a connection passes the challenge.
 */
export async function listen(
  want: BootLine['listen'],
  secret: Buffer,
  sessions: Sessions,
  onAuthenticated: () => void,
): Promise<HelloLine> {
  const hello: HelloLine = { pid: process.pid, listening: {}, errors: [] };
  if (want.unix) {
    const file = want.unix;
    try {
      await fs.mkdir(path.dirname(file), { recursive: true });
      await fs.rm(file, { force: true });
      const server = await open(secret, sessions, onAuthenticated, 'unix', (s) => s.listen(file));
      // The gateway may run as another user; the handshake, not the mode, keeps others out.
      await fs.chmod(file, 0o666);
      hello.listening.unix = file;
      server.unref();
    } catch (err) {
      hello.errors.push(`unix socket ${file}: ${(err as Error).message}`);
    }
  }
  if (want.tcp) {
    const { host, port } = want.tcp;
    try {
      const server = await open(secret, sessions, onAuthenticated, 'tcp', (s) => s.listen(port, host));
      const addr = server.address() as net.AddressInfo;
      hello.listening.tcp = { host: addr.address, port: addr.port };
      server.unref();
    } catch (err) {
      hello.errors.push(`tcp ${host}:${port}: ${(err as Error).message}`);
    }
  }
  return hello;
}

let nextId = 1;

function open(
  secret: Buffer,
  sessions: Sessions,
  onAuthenticated: () => void,
  kind: string,
  start: (s: net.Server) => void,
): Promise<net.Server> {
  const server = net.createServer((socket) => {
    const label = `${kind}#${nextId++}`;
    socket.on('error', () => undefined);
    acceptHandshake(socket, secret).then(
      () => {
        socket.setNoDelay(true);
        onAuthenticated();
        sessions.serve(new FramedMessageReader(socket), new FramedMessageWriter(socket), label, socket, () =>
          socket.destroy(),
        );
      },
      (err: Error) => {
        // One line per refused connection: a loop of garbage must not flood the log.
        logger.warn({ connection: label, reason: err.message }, 'connection refused');
        socket.destroy();
      },
    );
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.once('listening', () => {
      server.off('error', reject);
      server.on('error', (err) => logger.warn({ kind, err: err.message }, 'listener error'));
      resolve(server);
    });
    start(server);
  });
}
