import * as net from 'node:net';
import { logger } from './log';

/**
 * A run with egress has no network, only a Unix socket to the gateway's egress proxy. Tools
 * speak TCP to proxies (HTTP_PROXY=http://127.0.0.1:PORT), so the runner bridges that loopback
 * port to the socket. The bridge decides nothing: the proxy behind the socket enforces the
 * allow-list, out of reach of code in the run.
 */
export function startEgressBridge(socketPath: string, port: number): Promise<net.Server> {
  const server = net.createServer((local) => {
    const remote = net.connect(socketPath);
    local.pipe(remote).pipe(local);
    local.on('error', () => remote.destroy());
    remote.on('error', (err) => {
      logger.warn({ err: err.message }, 'egress proxy unreachable');
      local.destroy();
    });
    local.on('close', () => remote.destroy());
    remote.on('close', () => local.destroy());
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve(server);
    });
  });
}

/** Starts the bridge when the sandbox was given an egress socket. */
export async function startEgressFromEnvironment(env = process.env): Promise<void> {
  const socket = env.TETHER_EGRESS_SOCKET;
  const port = Number(env.TETHER_EGRESS_PORT);
  if (!socket || !Number.isInteger(port) || port <= 0) return;
  try {
    await startEgressBridge(socket, port);
    logger.info({ port, allow: env.TETHER_EGRESS_ALLOW }, 'egress bridge listening');
  } catch (err) {
    logger.warn({ err: (err as Error).message }, 'egress bridge could not start; the run has no egress');
  }
}
