import { isIP } from 'node:net';

/** One allow-list entry: an exact host, or every host under a suffix (`*.example.org`), on one port. */
export interface HostRule {
  /** Lower-case host, or the suffix without `*.` when `wildcard`. */
  host: string;
  wildcard: boolean;
  port: number;
}

const LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/** Parses `host[:port]` or `*.suffix[:port]` (port 443 when left out); throws with the reason. */
export function parseRule(entry: string): HostRule {
  const text = entry.trim().toLowerCase();
  const m = /^(.+?)(?::([0-9]{1,5}))?$/.exec(text);
  if (!m) throw new Error(`egress entry ${JSON.stringify(entry)} is not host:port`);
  const port = m[2] === undefined ? 443 : Number(m[2]);
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    throw new Error(`egress entry ${JSON.stringify(entry)} has no valid port`);
  let host = m[1];
  const wildcard = host.startsWith('*.');
  if (wildcard) host = host.slice(2);
  if (isIP(host) || host.startsWith('['))
    throw new Error(`egress entry ${JSON.stringify(entry)} is an IP address: only host names are allowed`);
  const labels = host.split('.');
  if (host.length > 253 || !labels.every((l) => LABEL.test(l)))
    throw new Error(`egress entry ${JSON.stringify(entry)} is not a host name`);
  if (wildcard && labels.length < 2)
    throw new Error(
      `egress entry ${JSON.stringify(entry)} is too wide: a wildcard needs a suffix of two labels or more`,
    );
  return { host, wildcard, port };
}

export function formatRule(r: HostRule): string {
  return `${r.wildcard ? '*.' : ''}${r.host}:${r.port}`;
}

/** Whether a rule lets a connection to host:port through. `*.a.b` covers `x.a.b` but not `a.b`. */
export function ruleAllows(rule: HostRule, host: string, port: number): boolean {
  if (rule.port !== port) return false;
  const h = host.toLowerCase().replace(/\.$/, '');
  return rule.wildcard ? h.endsWith(`.${rule.host}`) : h === rule.host;
}

/** Whether `inner` allows nothing `outer` does not. */
export function ruleCovers(outer: HostRule, inner: HostRule): boolean {
  if (outer.port !== inner.port) return false;
  if (!outer.wildcard) return !inner.wildcard && inner.host === outer.host;
  return inner.host.endsWith(`.${outer.host}`) || (inner.wildcard && inner.host === outer.host);
}

/** The entries the server config allows a tenant: its own plus those under `*`. */
export function tenantRules(allowed: Record<string, string[]>, tenant: string): HostRule[] {
  return [...(allowed['*'] ?? []), ...(allowed[tenant] ?? [])].map(parseRule);
}

/**
 * The allow-list of a new run: what it asked for, each entry within the tenant's list (an
 * empty request takes the whole list). Throws with a message naming what is allowed.
 */
export function narrow(tenantList: HostRule[], requested: string[]): HostRule[] {
  const allowedText = tenantList.length ? tenantList.map(formatRule).join(', ') : 'none';
  if (tenantList.length === 0) throw new Error(`egress is not allowed for this tenant (allowed hosts: none)`);
  if (requested.length === 0) return dedupe(tenantList);
  if (requested.length > 64) throw new Error('egress.allow has more than 64 entries');
  const out: HostRule[] = [];
  for (const entry of requested) {
    const rule = parseRule(entry);
    if (!tenantList.some((t) => ruleCovers(t, rule)))
      throw new Error(
        `egress entry ${formatRule(rule)} is not within what this tenant may reach (allowed hosts: ${allowedText})`,
      );
    out.push(rule);
  }
  return dedupe(out);
}

function dedupe(rules: HostRule[]): HostRule[] {
  const seen = new Map(rules.map((r) => [formatRule(r), r]));
  return [...seen.values()];
}

/**
 * Addresses a run must never reach through the proxy: loopback, private ranges, link-local
 * (which holds the cloud metadata address 169.254.169.254), carrier-grade NAT, multicast,
 * reserved and unspecified ones, and their IPv6 counterparts (including IPv4-mapped forms).
 */
export function isForbiddenAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return forbidden4(address.split('.').map(Number));
  if (family !== 6) return true;
  const a = address.toLowerCase();
  const mapped = /^(?:0*:)*(?:0*:)?ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(a) ?? /^::(\d+\.\d+\.\d+\.\d+)$/.exec(a);
  if (mapped) return forbidden4(mapped[1].split('.').map(Number));
  const words = expand6(a);
  if (!words) return true;
  if (words.every((w) => w === 0)) return true; // ::
  if (words.slice(0, 7).every((w) => w === 0) && words[7] === 1) return true; // ::1
  const w0 = words[0];
  if ((w0 & 0xfe00) === 0xfc00) return true; // fc00::/7 unique local
  if ((w0 & 0xffc0) === 0xfe80) return true; // fe80::/10 link-local
  if ((w0 & 0xffc0) === 0xfec0) return true; // fec0::/10 site-local
  if ((w0 & 0xff00) === 0xff00) return true; // multicast
  if (w0 === 0x64 && words[1] === 0xff9b) return true; // 64:ff9b::/96 NAT64 can reach anything IPv4
  if (w0 === 0x2002) return true; // 6to4 embeds an IPv4 address
  if (w0 === 0x2001 && words[1] === 0x0db8) return true; // documentation
  if (w0 === 0x2001 && words[1] === 0) return true; // Teredo
  if (words.slice(0, 6).every((w) => w === 0)) return true; // IPv4-compatible (deprecated)
  return false;
}

function forbidden4([a, b, c]: number[]): boolean {
  return (
    a === 0 ||
    a === 10 ||
    a === 127 ||
    (a === 100 && b >= 64 && b <= 127) ||
    (a === 169 && b === 254) ||
    (a === 172 && b >= 16 && b <= 31) ||
    (a === 192 && b === 0 && (c === 0 || c === 2)) ||
    (a === 192 && b === 88 && c === 99) ||
    (a === 192 && b === 168) ||
    (a === 198 && (b === 18 || b === 19)) ||
    (a === 198 && b === 51 && c === 100) ||
    (a === 203 && b === 0 && c === 113) ||
    a >= 224
  );
}

function expand6(a: string): number[] | undefined {
  const [head, tail, extra] = a.split('::');
  if (extra !== undefined) return undefined;
  const part = (s: string | undefined) => (s ? s.split(':') : []);
  const h = part(head);
  const t = part(tail);
  const fill = tail === undefined ? 0 : 8 - h.length - t.length;
  const all = [...h, ...Array(Math.max(0, fill)).fill('0'), ...t];
  if (all.length !== 8 || !all.every((w) => /^[0-9a-f]{1,4}$/.test(w))) return undefined;
  return all.map((w) => parseInt(w, 16));
}
