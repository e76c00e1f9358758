import { promises as fs } from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { FramedMessageReader, FramedMessageWriter } from '../../../protocol/src/framing';
import type { BootLine, HelloLine } from '../../../protocol/src/transport';
import { logger } from '../log';
import { acceptHandshake } from './handshake';
import type { Sessions } from './sessions';

/**
 * The runner's listeners and the socket connections they accepted. Before a memory checkpoint
 * of the sandbox they are all closed (`quiesce`: gVisor does not save a sandbox holding a
 * connected host Unix socket), and after the restore opened again as the boot line asked
 * (`reopen`); the run itself, with everything its tools hold, is untouched meanwhile.
 */
export class Listeners {
  private servers: net.Server[] = [];
  private readonly sockets = new Set<net.Socket>();
  private want: BootLine['listen'] = {};

  constructor(
    private readonly secret: Buffer,
    private readonly sessions: Sessions,
    private readonly onAuthenticated: () => void,
  ) {}

  /** Opens the listeners the boot line asks for. */
  async listen(want: BootLine['listen']): Promise<HelloLine> {
    this.want = want;
    const hello = await listen(want, this.secret, this.sessions, this.onAuthenticated, (server, socket) => {
      if (server) this.servers.push(server);
      if (socket) {
        this.sockets.add(socket);
        socket.once('close', () => this.sockets.delete(socket));
      }
    });
    return hello;
  }

  /** How many socket connections are open now. */
  get connections(): number {
    return this.sockets.size;
  }

  /**
   * Ends every socket connection (what was written to it is flushed first), then closes the
   * listeners and removes the Unix socket's file: once the file is gone, nothing of the runner's
   * is connected to the host.
   */
  async quiesce(): Promise<void> {
    await Promise.all(
      [...this.sockets].map(
        (s) =>
          new Promise<void>((resolve) => {
            const done = () => {
              s.destroy();
              resolve();
            };
            const timer = setTimeout(done, 500);
            s.end(() => {
              clearTimeout(timer);
              done();
            });
          }),
      ),
    );
    this.sockets.clear();
    const servers = this.servers;
    this.servers = [];
    await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
    if (this.want.unix) await fs.rm(this.want.unix, { force: true });
    logger.info({ listeners: servers.length }, 'runner quiesced: no connection, no listener');
  }

  /** Listens again as the boot line asked, after a restore (or a checkpoint that failed). */
  async reopen(): Promise<HelloLine> {
    if (this.servers.length > 0) return { pid: process.pid, listening: {}, errors: ['already listening'] };
    const hello = await this.listen(this.want);
    logger.info({ listening: hello.listening, errors: hello.errors }, 'runner listening again');
    return hello;
  }
}

/**
 * Opens the listeners the boot line asks for. Node opens every descriptor close-on-exec, so
 * the processes the tools spawn (language servers, kernels, adapters) inherit no listener.
 * `onAuthenticated` is told each time a connection passes the challenge; `track`, of every
 * listener opened and every connection accepted.
 */
export async function listen(
  want: BootLine['listen'],
  secret: Buffer,
  sessions: Sessions,
  onAuthenticated: () => void,
  track: (server?: net.Server, socket?: net.Socket) => void = () => undefined,
): Promise<HelloLine> {
  const hello: HelloLine = { pid: process.pid, listening: {}, errors: [] };
  if (want.unix) {
    const file = want.unix;
    try {
      await fs.mkdir(path.dirname(file), { recursive: true });
      await fs.rm(file, { force: true });
      const server = await open(secret, sessions, onAuthenticated, track, 'unix', (s) => s.listen(file));
      track(server);
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
      const server = await open(secret, sessions, onAuthenticated, track, 'tcp', (s) => s.listen(port, host));
      track(server);
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
  track: (server?: net.Server, socket?: net.Socket) => void,
  kind: string,
  start: (s: net.Server) => void,
): Promise<net.Server> {
  const server = net.createServer((socket) => {
    const label = `${kind}#${nextId++}`;
    socket.on('error', () => undefined);
    track(undefined, socket);
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
