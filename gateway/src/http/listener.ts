import * as http from 'node:http';
import * as http2 from 'node:http2';
import * as net from 'node:net';
import { logger } from '../log';

export type HttpRequest = http.IncomingMessage | http2.Http2ServerRequest;
export type HttpResponse = http.ServerResponse | http2.Http2ServerResponse;

/**
 * A surface served on the HTTP listener beside tether's own API, registered by the module that
 * owns it. A request goes to the first route that matches it. Both request types come through
 * the same code: HTTP/1.1's and HTTP/2's compatibility API have the same shape for what a
 * handler needs (method, url, headers, the body as a stream; writeHead, write, end).
 */
export interface HttpRoute {
  /** Names the route in logs. */
  readonly name: string;
  matches(req: HttpRequest): boolean;
  /** Answers the request; a handler that throws is answered 500. */
  handle(req: HttpRequest, res: HttpResponse): void;
}

export interface HttpListenerOptions {
  /** host:port; port 0 takes a free one. */
  listen: string;
  /** tether.v1.Gateway over Connect: every request under `/tether.v1.Gateway/`. */
  gateway: (req: HttpRequest, res: HttpResponse) => void;
  /** HTTP/2 streams one connection may have open at once; 0 leaves Node's default. */
  maxConcurrentStreams?: number;
  /** How long a client has to send its request's headers (and the first bytes of a connection). */
  headersTimeoutMs?: number;
  /** How long an idle connection is kept for the client's next request (HTTP/1.1 keep-alive; HTTP/2 without streams). */
  keepAliveTimeoutMs?: number;
}

export const GATEWAY_PATH = '/tether.v1.Gateway/';

/** What an HTTP/2 client sends first; HTTP/1.1 cannot start that way. */
const H2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

/** A JSON error in the shape of Connect's, for what no route serves. */
export function sendJsonError(res: HttpResponse, httpStatus: number, code: string, message: string): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  const body = JSON.stringify({ code, message });
  res.writeHead(httpStatus, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/**
 * One TCP port for HTTP/1.1 and cleartext HTTP/2 (prior knowledge, as curl's
 * `--http2-prior-knowledge`, gRPC-style clients and reqwest send it): each connection's first
 * bytes tell which, and the connection goes to an `http.Server` or an `http2.Http2Server`
 * that never listen themselves. Requests under `/tether.v1.Gateway/` go to the Connect
 * handler; anything else to the first registered route that matches, or 404.
 */
export class HttpListener {
  private readonly routes: HttpRoute[] = [];
  private readonly sockets = new Set<net.Socket>();
  private readonly h1: http.Server;
  private readonly h2: http2.Http2Server;
  private readonly sessions = new Set<http2.Http2Session>();
  private closing = false;

  private constructor(
    private readonly tcp: net.Server,
    private readonly options: HttpListenerOptions,
    readonly address: string,
  ) {
    const headersTimeout = options.headersTimeoutMs ?? 20_000;
    const keepAlive = options.keepAliveTimeoutMs ?? 65_000;
    const dispatch = (req: HttpRequest, res: HttpResponse) => this.dispatch(req, res);

    this.h1 = http.createServer(dispatch);
    this.h1.headersTimeout = headersTimeout;
    // Streams (process output, file uploads) may take as long as they take.
    this.h1.requestTimeout = 0;
    this.h1.keepAliveTimeout = keepAlive;
    // Node checks header and request timeouts of the connections it tracks once its server
    // is listening: this one never listens itself, so it is told it does.
    this.h1.emit('listening');

    const max = options.maxConcurrentStreams ?? 0;
    this.h2 = http2.createServer({ ...(max > 0 ? { settings: { maxConcurrentStreams: max } } : {}) }, dispatch);
    // A session with no open stream is closed after the keep-alive time, as an idle HTTP/1.1 connection is.
    this.h2.on('session', (session) => {
      this.sessions.add(session);
      let open = 0;
      let timer: NodeJS.Timeout | undefined;
      const idle = () => {
        clearTimeout(timer);
        timer = setTimeout(() => session.close(), keepAlive).unref();
      };
      idle();
      session.on('stream', (stream) => {
        open++;
        clearTimeout(timer);
        stream.once('close', () => {
          if (--open === 0) idle();
        });
      });
      session.once('close', () => {
        clearTimeout(timer);
        this.sessions.delete(session);
      });
      session.on('error', () => undefined);
    });
    this.h2.on('sessionError', () => undefined);

    tcp.on('connection', (socket) => this.accept(socket, headersTimeout));
    tcp.on('error', (err) => logger.error({ err, address }, 'HTTP listener failed'));
  }

  /** Starts listening on `options.listen`; resolves once it accepts connections. */
  static async start(options: HttpListenerOptions): Promise<HttpListener> {
    const at = options.listen.lastIndexOf(':');
    const host = options.listen.slice(0, at).replace(/^\[(.*)\]$/, '$1');
    const port = Number(options.listen.slice(at + 1));
    // As http.Server's own: half-open sockets (HTTP/1.1 answers after the client's FIN), no Nagle delay.
    const tcp = net.createServer({ allowHalfOpen: true, noDelay: true });
    await new Promise<void>((resolve, reject) => {
      tcp.once('error', reject);
      tcp.listen(port, host, () => {
        tcp.off('error', reject);
        resolve();
      });
    });
    const bound = tcp.address() as net.AddressInfo;
    const shown = host.includes(':') ? `[${host}]` : host;
    return new HttpListener(tcp, options, `${shown}:${bound.port}`);
  }

  get port(): number {
    return (this.tcp.address() as net.AddressInfo).port;
  }

  /** Adds a route, after those registered before it. */
  register(route: HttpRoute): void {
    this.routes.push(route);
  }

  /** Reads a connection's first bytes and hands it, bytes and all, to the server of its protocol. */
  private accept(socket: net.Socket, timeoutMs: number): void {
    if (this.closing) {
      socket.destroy();
      return;
    }
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
    // Until a server owns it, a reset connection is only dropped.
    const onError = () => socket.destroy();
    socket.on('error', onError);
    socket.setTimeout(timeoutMs, () => socket.destroy());
    let head: Buffer = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = head.length ? Buffer.concat([head, chunk]) : chunk;
      const n = Math.min(head.length, H2_PREFACE.length);
      const h2 = head.subarray(0, n).equals(H2_PREFACE.subarray(0, n));
      if (h2 && head.length < H2_PREFACE.length) return;
      socket.removeListener('data', onData);
      socket.removeListener('error', onError);
      socket.setTimeout(0);
      socket.pause();
      socket.unshift(head);
      // Each server reads what was already read from the buffer: the HTTP/1.1 parser as
      // the socket flows again, the HTTP/2 session on its next tick.
      if (h2) this.h2.emit('connection', socket);
      else {
        this.h1.emit('connection', socket);
        socket.resume();
      }
    };
    socket.on('data', onData);
  }

  private dispatch(req: HttpRequest, res: HttpResponse): void {
    const url = req.url ?? '/';
    if (url.startsWith(GATEWAY_PATH)) {
      this.options.gateway(req, res);
      return;
    }
    for (const route of this.routes) {
      try {
        if (!route.matches(req)) continue;
        route.handle(req, res);
      } catch (err) {
        logger.error({ err, route: route.name }, 'HTTP route failed');
        sendJsonError(res, 500, 'internal', `internal error: ${(err as Error).message}`);
      }
      return;
    }
    const path = url.split('?')[0];
    sendJsonError(res, 404, 'not_found', `nothing is served at ${req.method} ${path}`);
  }

  /**
   * Stops accepting connections, closes idle ones, lets requests under way finish for up to
   * `graceMs`, then cuts what is left.
   */
  async close(graceMs = 3000): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    const stopped = new Promise<void>((resolve) => this.tcp.close(() => resolve()));
    this.h1.closeIdleConnections();
    for (const s of this.sessions) s.close();
    const drained = new Promise<void>((resolve) => {
      const check = setInterval(() => {
        this.h1.closeIdleConnections();
        if (this.sockets.size === 0) done();
      }, 50);
      const force = setTimeout(() => {
        for (const s of this.sockets) s.destroy();
        done();
      }, graceMs);
      const done = () => {
        clearInterval(check);
        clearTimeout(force);
        resolve();
      };
    });
    await drained;
    await stopped;
    // Stops the HTTP/1.1 server's connection checks (it was never listening itself).
    this.h1.close(() => undefined);
  }
}
