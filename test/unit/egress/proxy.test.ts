import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import * as http from 'node:http';
import * as net from 'node:net';
import type { AddressInfo } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { EgressLog, readEgressLog } from '../../../gateway/src/egress/log';
import { parseRule } from '../../../gateway/src/egress/policy';
import { parseAuthority, RunProxy } from '../../../gateway/src/egress/proxy';

/** The proxy on a real Unix socket, against a real HTTP server on loopback. */
let dir: string;
let upstream: http.Server;
let port: number;
let proxy: RunProxy;
let log: EgressLog;

before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'tether-proxy-'));
  upstream = http.createServer((req, res) => res.end(`hello ${req.headers.host}`));
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  port = (upstream.address() as AddressInfo).port;
  log = new EgressLog(path.join(dir, 'log'));
  proxy = new RunProxy({
    runId: 'run-1',
    tenant: 'alice',
    rules: [parseRule(`ok.test:${port}`), parseRule(`dns.test:${port}`)],
    socketPath: path.join(dir, 'proxy.sock'),
    log,
    testHosts: { 'ok.test': '127.0.0.1' },
    // A real name whose DNS answer is private must be refused: the lookup stands in for DNS.
    lookup: async () => ['10.0.0.5'],
  });
  await proxy.listen();
});

after(async () => {
  await proxy.close();
  await new Promise<void>((r) => upstream.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

function viaProxy(raw: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = net.connect(path.join(dir, 'proxy.sock'));
    let out = '';
    s.on('data', (d) => {
      out += d.toString();
      if (out.includes('hello') || /^HTTP\/1\.1 [45]/.test(out)) s.end();
    });
    s.on('end', () => resolve(out));
    s.on('close', () => resolve(out));
    s.on('error', reject);
    s.write(raw);
  });
}

test('forwards plain http and tunnels CONNECT to an allowed, mapped host', async () => {
  assert.match(
    await viaProxy(`GET http://ok.test:${port}/x HTTP/1.1\r\nHost: ok.test:${port}\r\nConnection: close\r\n\r\n`),
    /200 OK[\s\S]*hello ok\.test:/,
  );
  assert.match(
    await viaProxy(
      `CONNECT ok.test:${port} HTTP/1.1\r\nHost: ok.test\r\n\r\nGET / HTTP/1.1\r\nHost: ok.test\r\nConnection: close\r\n\r\n`,
    ),
    /^HTTP\/1\.1 200 Connection Established[\s\S]*hello ok\.test/,
  );
});

test('refuses names off the list, other ports, IP literals and names resolving to private addresses', async () => {
  assert.match(
    await viaProxy('CONNECT other.test:443 HTTP/1.1\r\n\r\n'),
    /^HTTP\/1\.1 403 tether egress: other\.test:443 is not on the egress allow-list of this run \(allowed: ok\.test:\d+, dns\.test:\d+\)/,
  );
  assert.match(
    await viaProxy(`CONNECT ok.test:${port + 1} HTTP/1.1\r\n\r\n`),
    /403 .*is not on the egress allow-list of this run/,
  );
  assert.match(
    await viaProxy(`CONNECT 127.0.0.1:${port} HTTP/1.1\r\n\r\n`),
    /403 tether egress: 127\.0\.0\.1 is an IP address/,
  );
  assert.match(await viaProxy(`CONNECT [::1]:${port} HTTP/1.1\r\n\r\n`), /403 tether egress: ::1 is an IP address/);
  assert.match(
    await viaProxy(`GET http://169.254.169.254/latest/meta-data HTTP/1.1\r\nHost: x\r\n\r\n`),
    /403 tether egress: 169\.254\.169\.254 is an IP address/,
  );
  assert.match(
    await viaProxy(`CONNECT dns.test:${port} HTTP/1.1\r\n\r\n`),
    /403 tether egress: dns\.test resolves to 10\.0\.0\.5, a private/,
  );
  assert.match(await viaProxy('GET /relative HTTP/1.1\r\nHost: x\r\n\r\n'), /400 tether egress: not a proxy request/);
  assert.equal(parseAuthority('a.b:0'), undefined);
  assert.deepEqual(parseAuthority('[::1]:8080'), { host: '[::1]', port: 8080 });
});

test('every request is a JSON line in the tenant log, with bytes for allowed ones', async () => {
  await new Promise((r) => setTimeout(r, 100));
  const records = await readEgressLog(path.join(dir, 'log'), 'alice', 'run-1');
  const allowed = records.filter((r) => r.allowed);
  assert.equal(allowed.length, 2);
  assert.ok(allowed.every((r) => r.host === 'ok.test' && r.address === '127.0.0.1' && r.bytesIn > 0));
  const refused = records.filter((r) => !r.allowed);
  assert.equal(refused.length, 7);
  assert.ok(refused.every((r) => r.reason && r.bytesIn === 0));
  assert.deepEqual(await readEgressLog(path.join(dir, 'log'), 'bob'), []);
});
