import { promises as dns } from 'node:dns';
import { promises as fs } from 'node:fs';
import * as http from 'node:http';
import * as net from 'node:net';
import type { Duplex } from 'node:stream';
import type { EgressLog, EgressRecord } from './log';
import { formatRule, isForbiddenAddress, ruleAllows, type HostRule } from './policy';

export interface RunProxyOptions {
  runId: string;
  tenant: string;
  rules: HostRule[];
  /** Where the proxy listens; the run reaches it through a bind mount of its folder. */
  socketPath: string;
  log: EgressLog;
  /** Names resolved to a loopback address without DNS (tests only, from config egress.testHosts). */
  testHosts?: Record<string, string>;
  /** Resolver; DNS by default. */
  lookup?: (host: string) => Promise<string[]>;
}

type Decision = { ok: true; address: string } | { ok: false; reason: string };

const CONNECT_TIMEOUT_MS = 10_000;
const IDLE_TIMEOUT_MS = 120_000;
const MAX_CONNECTIONS = 64;

const defaultLookup = async (host: string) =>
  (await dns.lookup(host, { all: true, verbatim: true })).map((a) => a.address);

/**
 * The egress proxy of one run: a small HTTP proxy (CONNECT tunnels for https, absolute-URI
 * forwarding for plain http) on a Unix socket. It is the run's only way out, so it decides
 * everything itself: the host must be a name on the run's allow-list with its port, the name
 * is resolved here and every address it resolves to must be public, and the connection goes
 * to the address that was checked (no second lookup a DNS answer could change). Each request
 * is logged for the tenant.
 */
export class RunProxy {
  private readonly server: http.Server;
  private readonly sockets = new Set<Duplex>();

  constructor(private readonly opts: RunProxyOptions) {
    this.server = http.createServer({ requestTimeout: 0 });
    this.server.maxConnections = MAX_CONNECTIONS;
    this.server.on(
      'connect',
      (req: http.IncomingMessage, socket: Duplex, head: Buffer) => void this.tunnel(req, socket, head),
    );
    this.server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => void this.forward(req, res));
    this.server.on('connection', (s: net.Socket) => {
      this.sockets.add(s);
      s.setTimeout(IDLE_TIMEOUT_MS, () => s.destroy());
      s.on('close', () => this.sockets.delete(s));
    });
    this.server.on('clientError', (_err, socket: Duplex) => socket.destroy());
  }

  get allowList(): string {
    return this.opts.rules.map(formatRule).join(', ') || 'none';
  }

  async listen(): Promise<void> {
    await fs.rm(this.opts.socketPath, { force: true });
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.opts.socketPath, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    // The run's user is not the gateway's: it needs write permission to connect.
    await fs.chmod(this.opts.socketPath, 0o666);
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await fs.rm(this.opts.socketPath, { force: true });
  }

  /** Whether host:port may be reached, and at which address. */
  async decide(rawHost: string, port: number): Promise<Decision> {
    const host = rawHost
      .replace(/^\[|\]$/g, '')
      .toLowerCase()
      .replace(/\.$/, '');
    if (!host) return { ok: false, reason: 'no host named' };
    if (net.isIP(host))
      return {
        ok: false,
        reason: `${host} is an IP address; the egress allow-list admits host names only (allowed: ${this.allowList})`,
      };
    if (!this.opts.rules.some((r) => ruleAllows(r, host, port))) {
      return {
        ok: false,
        reason: `${host}:${port} is not on the egress allow-list of this run (allowed: ${this.allowList})`,
      };
    }
    const mapped = this.opts.testHosts?.[host];
    if (mapped) return { ok: true, address: mapped };
    let addresses: string[];
    try {
      addresses = await (this.opts.lookup ?? defaultLookup)(host);
    } catch (err) {
      return {
        ok: false,
        reason: `${host} does not resolve (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
      };
    }
    if (addresses.length === 0) return { ok: false, reason: `${host} does not resolve` };
    const bad = addresses.find(isForbiddenAddress);
    if (bad)
      return {
        ok: false,
        reason: `${host} resolves to ${bad}, a private, loopback, link-local or reserved address, which runs may not reach`,
      };
    return { ok: true, address: addresses[0] };
  }

  private record(partial: Omit<EgressRecord, 'time' | 'runId' | 'tenant' | 'durationMs'>, started: number): void {
    void this.opts.log.append({
      time: new Date().toISOString(),
      runId: this.opts.runId,
      tenant: this.opts.tenant,
      ...partial,
      durationMs: Date.now() - started,
    });
  }

  private async tunnel(req: http.IncomingMessage, client: Duplex, head: Buffer): Promise<void> {
    const started = Date.now();
    const target = parseAuthority(req.url ?? '');
    if (!target) {
      refuseRaw(client, 400, `CONNECT needs host:port, got ${JSON.stringify((req.url ?? '').slice(0, 200))}`);
      this.record(
        {
          method: 'CONNECT',
          host: (req.url ?? '').slice(0, 200),
          port: 0,
          allowed: false,
          reason: 'malformed CONNECT target',
          bytesOut: 0,
          bytesIn: 0,
        },
        started,
      );
      return;
    }
    const decision = await this.decide(target.host, target.port);
    if (!decision.ok) {
      refuseRaw(client, 403, decision.reason);
      this.record(
        {
          method: 'CONNECT',
          host: target.host,
          port: target.port,
          allowed: false,
          reason: decision.reason,
          bytesOut: 0,
          bytesIn: 0,
        },
        started,
      );
      return;
    }
    let bytesOut = head.length;
    let bytesIn = 0;
    let failure: string | undefined;
    let connected = false;
    const upstream = net.connect({ host: decision.address, port: target.port });
    upstream.setTimeout(CONNECT_TIMEOUT_MS, () => upstream.destroy(new Error('connect timed out')));
    upstream.once('connect', () => {
      connected = true;
      upstream.setTimeout(IDLE_TIMEOUT_MS);
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length) upstream.write(head);
      client.on('data', (d: Buffer) => (bytesOut += d.length));
      upstream.on('data', (d: Buffer) => (bytesIn += d.length));
      client.pipe(upstream);
      upstream.pipe(client);
    });
    upstream.on('error', (err) => {
      failure ??= err.message;
      if (!connected) refuseRaw(client, 502, `could not reach ${target.host}:${target.port}: ${err.message}`);
      else client.destroy();
    });
    client.on('error', () => upstream.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => {
      client.destroy();
      this.record(
        {
          method: 'CONNECT',
          host: target.host,
          port: target.port,
          allowed: true,
          address: decision.address,
          reason: failure,
          bytesOut,
          bytesIn,
        },
        started,
      );
    });
  }

  private async forward(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const started = Date.now();
    let url: URL;
    try {
      url = new URL(req.url ?? '');
      if (url.protocol !== 'http:') throw new Error('only http:// URLs are forwarded; https goes through CONNECT');
    } catch (err) {
      refuse(res, 400, `not a proxy request: ${(err as Error).message}`);
      this.record(
        {
          method: req.method ?? '?',
          host: '',
          port: 0,
          allowed: false,
          reason: 'not an absolute http URL',
          bytesOut: 0,
          bytesIn: 0,
        },
        started,
      );
      return;
    }
    const port = url.port ? Number(url.port) : 80;
    const decision = await this.decide(url.hostname, port);
    if (!decision.ok) {
      refuse(res, 403, decision.reason);
      this.record(
        {
          method: req.method ?? '?',
          host: url.hostname,
          port,
          allowed: false,
          reason: decision.reason,
          bytesOut: 0,
          bytesIn: 0,
        },
        started,
      );
      return;
    }
    const headers = { ...req.headers };
    delete headers['proxy-connection'];
    delete headers['proxy-authorization'];
    headers.host = url.host;
    let bytesOut = 0;
    let bytesIn = 0;
    let failure: string | undefined;
    const upstream = http.request({
      host: decision.address,
      port,
      method: req.method,
      path: `${url.pathname}${url.search}`,
      headers,
      agent: false,
      setHost: false,
    });
    upstream.setTimeout(IDLE_TIMEOUT_MS, () => upstream.destroy(new Error('timed out')));
    upstream.on('response', (up) => {
      res.writeHead(up.statusCode ?? 502, up.statusMessage, up.headers);
      up.on('data', (d: Buffer) => (bytesIn += d.length));
      up.pipe(res);
    });
    upstream.on('error', (err) => {
      failure = err.message;
      if (!res.headersSent) refuse(res, 502, `could not reach ${url.host}: ${err.message}`);
      else res.destroy();
    });
    req.on('data', (d: Buffer) => (bytesOut += d.length));
    req.pipe(upstream);
    res.on('close', () => {
      upstream.destroy();
      this.record(
        {
          method: req.method ?? '?',
          host: url.hostname,
          port,
          allowed: true,
          address: decision.address,
          reason: failure,
          bytesOut,
          bytesIn,
        },
        started,
      );
    });
  }
}

/** host:port of a CONNECT line; IPv6 literals come bracketed. */
export function parseAuthority(s: string): { host: string; port: number } | undefined {
  const m = /^(\[[0-9a-fA-F:.]+\]|[^:\s/]+):([0-9]{1,5})$/.exec(s);
  if (!m) return undefined;
  const port = Number(m[2]);
  return port >= 1 && port <= 65535 ? { host: m[1], port } : undefined;
}

/** A status line's reason phrase carries the message too: pip and git print only that. */
const phrase = (why: string) => `tether egress: ${why}`.replace(/[^\x20-\x7e]/g, '?').slice(0, 400);

function refuseRaw(socket: Duplex, code: number, why: string): void {
  const body = `${phrase(why)}\n`;
  socket.end(
    `HTTP/1.1 ${code} ${phrase(why)}\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

function refuse(res: http.ServerResponse, code: number, why: string): void {
  const body = `${phrase(why)}\n`;
  res.writeHead(code, phrase(why), {
    'Content-Type': 'text/plain',
    'Content-Length': Buffer.byteLength(body),
    Connection: 'close',
  });
  res.end(body);
}
