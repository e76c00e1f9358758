import { promises as fs } from 'node:fs';
import * as path from 'node:path';

/** One egress request as the tenant sees it. */
export interface EgressRecord {
  time: string;
  runId: string;
  tenant: string;
  /** CONNECT for a tunnel (https), or the HTTP method of a forwarded plain-http request. */
  method: string;
  host: string;
  port: number;
  allowed: boolean;
  /** Why it was refused, or why an allowed request failed upstream. */
  reason?: string;
  /** The address the proxy connected to. */
  address?: string;
  /** Bytes from the run to the host, and back. */
  bytesOut: number;
  bytesIn: number;
  durationMs: number;
}

/** A tenant's log file: its name is the tenant, encoded so that no tenant name leaves the folder. */
export function egressLogFile(dir: string, tenant: string): string {
  return path.join(dir, `${encodeURIComponent(tenant).replace(/\./g, '%2E')}.jsonl`);
}

/** Appends JSON lines to one file per tenant, in order. */
export class EgressLog {
  private tail = Promise.resolve();
  private ready?: Promise<unknown>;

  /** `onRecord` sees each record as it is appended (the audit log's copy). */
  constructor(
    readonly dir: string,
    private readonly onRecord?: (record: EgressRecord) => void,
  ) {}

  append(record: EgressRecord): Promise<void> {
    this.onRecord?.(record);
    this.ready ??= fs.mkdir(this.dir, { recursive: true, mode: 0o700 });
    const line = `${JSON.stringify(record)}\n`;
    this.tail = this.tail
      .then(() => this.ready)
      .then(() => fs.appendFile(egressLogFile(this.dir, record.tenant), line, { mode: 0o600 }))
      .catch(() => undefined);
    return this.tail;
  }
}

/** A tenant's records, optionally of one run; lines that do not parse are skipped. */
export async function readEgressLog(dir: string, tenant: string, runId?: string): Promise<EgressRecord[]> {
  let text: string;
  try {
    text = await fs.readFile(egressLogFile(dir, tenant), 'utf8');
  } catch {
    return [];
  }
  const out: EgressRecord[] = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    try {
      const r = JSON.parse(line) as EgressRecord;
      if (!runId || r.runId === runId) out.push(r);
    } catch {
      // a line cut by a crash: skip it
    }
  }
  return out;
}

/** Tenants with a log in the folder. */
export async function loggedTenants(dir: string): Promise<string[]> {
  const names = await fs.readdir(dir).catch(() => [] as string[]);
  return names.filter((n) => n.endsWith('.jsonl')).map((n) => decodeURIComponent(n.slice(0, -'.jsonl'.length)));
}
