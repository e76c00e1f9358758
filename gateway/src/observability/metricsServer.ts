import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Metrics } from './metrics';

export interface MetricsEndpoint {
  /** host:port it listens on (the real port when the config asked for 0). */
  address: string;
  close(): Promise<void>;
}

/** Serves GET /metrics in the Prometheus text format on its own address, apart from the gRPC port. */
export async function serveMetrics(metrics: Metrics, listen: string): Promise<MetricsEndpoint> {
  const cut = listen.lastIndexOf(':');
  const host = listen.slice(0, cut).replace(/^\[(.*)\]$/, '$1');
  const port = Number(listen.slice(cut + 1));
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (req.method !== 'GET' || path !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('only GET /metrics is served here\n');
      return;
    }
    metrics.text().then(
      (body) => res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(body),
      (err: Error) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`${err.message}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const bound = (server.address() as AddressInfo).port;
  return {
    address: `${host.includes(':') ? `[${host}]` : host}:${bound}`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
