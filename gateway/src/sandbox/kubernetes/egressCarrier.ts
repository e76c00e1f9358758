import * as http2 from 'node:http2';
import * as net from 'node:net';
import { Duplex } from 'node:stream';
import { logger } from '../../log';
import type { PodStream } from './streams';

/** In the runner image: the pod's end of the carriage (runner/src/egressCarrier.ts). */
export const CARRIER_SCRIPT = '/opt/tether/dist/runner/src/egressCarrier.js';

/** After an exec that ended on its own (the pod's node restarted it, a blip of the API server), the next try waits this long, doubling. */
const RETRY_MS = 500;
const RETRY_MAX_MS = 10_000;

export interface EgressCarrierOptions {
  runId: string;
  /** Opens `node <CARRIER_SCRIPT> <socket in the pod>` in the run's pod. */
  open(): Promise<PodStream>;
  /** The run's egress proxy on this gateway: its Unix socket. */
  proxySocket: string;
}

/**
 * A run pod's egress, carried to the gateway's proxy over an exec stream (the pods have no
 * route anywhere, the gateway included). The carrier in the pod opens one HTTP/2 CONNECT
 * stream per connection the run makes to its egress socket; this end pipes each to a new
 * connection to the run's proxy, which decides, resolves, connects and logs as for a Docker
 * run. HTTP/2 does the multiplexing and flow control: no framing of the project's own.
 *
 * The exec is opened again when it ends while the run lives (with a growing wait), and closed
 * with the run.
 */
export class EgressCarrier {
  private stream?: PodStream;
  private session?: http2.ServerHttp2Session;
  private closed = false;
  private retryMs = RETRY_MS;
  private timer?: NodeJS.Timeout;
  private readonly server = http2.createServer();

  constructor(private readonly opts: EgressCarrierOptions) {
    this.server.on('session', (session) => {
      this.session = session;
      session.on('error', () => undefined);
    });
    this.server.on('stream', (stream, headers) => this.pipe(stream, headers));
  }

  start(): void {
    void this.connect();
  }

  private async connect(): Promise<void> {
    if (this.closed) return;
    let stream: PodStream;
    try {
      stream = await this.opts.open();
    } catch (err) {
      logger.warn({ runId: this.opts.runId, err: (err as Error).message }, 'could not open the egress carrier');
      this.again();
      return;
    }
    if (this.closed) return void stream.close();
    this.stream = stream;
    this.server.emit('connection', Duplex.from({ readable: stream.stdout, writable: stream.stdin }));
    void stream.done.then((status) => {
      if (this.stream !== stream) return;
      this.stream = undefined;
      this.session?.destroy();
      if (this.closed) return;
      logger.warn(
        { runId: this.opts.runId, status: status.message, carrier: stream.stderr().trim().slice(-500) },
        'the egress carrier ended; opening it again',
      );
      this.again();
    });
    // Carried once: the next break starts from the shortest wait again.
    setTimeout(() => {
      if (this.stream === stream) this.retryMs = RETRY_MS;
    }, RETRY_MAX_MS).unref();
  }

  private again(): void {
    if (this.closed) return;
    this.timer = setTimeout(() => void this.connect(), this.retryMs);
    this.timer.unref();
    this.retryMs = Math.min(this.retryMs * 2, RETRY_MAX_MS);
  }

  /** One connection the run made: piped to a new connection to the run's proxy. */
  private pipe(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    if (headers[':method'] !== 'CONNECT') {
      stream.respond({ ':status': 405 });
      stream.end();
      return;
    }
    const proxy = net.connect(this.opts.proxySocket);
    proxy.once('connect', () => {
      stream.respond({ ':status': 200 });
      stream.pipe(proxy).pipe(stream);
    });
    const end = () => {
      proxy.destroy();
      if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
    };
    proxy.on('error', (err) => {
      logger.warn({ runId: this.opts.runId, err: err.message }, 'the egress proxy is unreachable');
      if (!stream.headersSent) stream.respond({ ':status': 502 });
      end();
    });
    proxy.on('close', end);
    stream.on('error', end);
    stream.on('close', end);
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    this.session?.destroy();
    this.stream?.close();
    this.server.close();
  }
}
