import { promises as fs } from 'node:fs';
import * as http2 from 'node:http2';
import * as net from 'node:net';
import * as path from 'node:path';
import { Duplex } from 'node:stream';

/**
 * Carries a run's egress to the gateway where the sandbox has no socket of the gateway's to
 * connect to (a Kubernetes pod with loopback-only networking). A replica execs this in the pod;
 * its stdin and stdout are the exec stream. It listens on the egress socket the runner's bridge
 * connects to, and carries each connection as one HTTP/2 CONNECT stream over stdio to the
 * gateway, which pipes it to the run's egress proxy: the proxy, and every decision, stays in
 * the gateway.
 *
 * Several replicas may exec one each. One carries at a time: the one listening on the lock
 * socket beside the egress socket. The others try the lock every second and take over when
 * nobody answers there (the carrying replica died and its exec ended with it).
 *
 * Nothing is written to stdout but HTTP/2 frames: what there is to say goes to stderr.
 */

const POLL_MS = 1000;
const STREAM_AUTHORITY = 'tether-egress:0';

const socketPath = process.argv[2] ?? '';
const lockPath = path.join(path.dirname(socketPath), 'carrier.lock');

function say(message: string): void {
  process.stderr.write(`egress carrier: ${message}\n`);
}

/** Whether another carrier answers on the lock socket. */
function anotherCarries(): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = net.connect(lockPath);
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
}

async function inode(file: string): Promise<number | undefined> {
  return (await fs.stat(file).catch(() => undefined))?.ino;
}

function listen(server: net.Server, file: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(file, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

const session = http2.connect(`http://${STREAM_AUTHORITY}`, {
  createConnection: () => Duplex.from({ readable: process.stdin, writable: process.stdout }),
});
session.on('error', (err) => say(`the stream to the gateway failed: ${err.message}`));
// The gateway gone (its replica stopped or died): nothing is left to carry to.
session.on('close', () => process.exit(0));
process.stdin.on('end', () => process.exit(0));

function carry(local: net.Socket): void {
  const stream = session.request({ ':method': 'CONNECT', ':authority': STREAM_AUTHORITY });
  local.pipe(stream).pipe(local);
  const end = () => {
    local.destroy();
    stream.close(http2.constants.NGHTTP2_CANCEL);
  };
  local.on('error', end);
  local.on('close', end);
  stream.on('error', end);
  stream.on('close', end);
}

async function lead(): Promise<void> {
  await fs.rm(lockPath, { force: true });
  await fs.rm(socketPath, { force: true });
  const lock = net.createServer((probe) => probe.destroy());
  const egress = net.createServer(carry);
  await listen(lock, lockPath);
  await listen(egress, socketPath);
  const mine = await inode(lockPath);
  say('carrying');
  // Another carrier that took over in the same moment (both found the lock silent) replaced
  // the lock file: this one steps back and waits, the other carries.
  for (;;) {
    await new Promise((r) => setTimeout(r, POLL_MS));
    if ((await inode(lockPath)) === mine) continue;
    lock.close();
    egress.close();
    say('another carrier took over');
    return;
  }
}

async function main(): Promise<void> {
  if (!socketPath) {
    say('usage: egressCarrier <egress socket path>');
    process.exit(2);
  }
  for (;;) {
    if (!(await anotherCarries())) await lead();
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

void main().catch((err: Error) => {
  say(err.message);
  process.exit(1);
});
