import { createWriteStream, type WriteStream } from 'node:fs';
import type { Writable } from 'node:stream';

/** The audit records, one per security-relevant event; docs/observability.md describes each field. */
export type AuditEvent =
  | {
      event: 'run.created';
      tenant: string;
      runId: string;
      state: string;
      limits: { memoryMb: number; cpuMillis: number; pids: number };
      workspace: 'host' | 'managed';
      features: string[];
      labels: string[];
      durationMs: number;
      error?: string;
    }
  | { event: 'run.deleted'; tenant: string; runId: string; lifetimeMs: number; state: string }
  | { event: 'run.failed'; tenant: string; runId: string; reason: string }
  | {
      event: 'run.paused' | 'run.resumed';
      tenant: string;
      runId: string;
      depth: string;
      ok: boolean;
      ms: number;
      /** Pause: why (requested, idle) and what was not kept. Resume: `resumed`. Or why it failed. */
      detail: string;
      stateBytes?: number;
    }
  | {
      event: 'tool.call';
      tenant: string;
      runId: string;
      callId: string;
      tool: string;
      tier: string;
      surface: string;
      approval: string;
      outcome: string;
      durationMs: number;
      bytesIn: number;
      bytesOut: number;
      arguments: ArgumentSummary;
      bridged: number;
      questions: number;
    }
  | {
      event: 'tool.bridged';
      tenant: string;
      runId: string;
      callId: string;
      tool: string;
      target: 'gateway' | 'client';
      outcome: string;
    }
  | {
      event: 'question';
      tenant: string;
      runId: string;
      callId: string;
      kind: 'ask' | 'permission';
      answer: string;
      options: number;
    }
  | {
      event: 'egress';
      tenant: string;
      runId: string;
      method: string;
      host: string;
      port: number;
      allowed: boolean;
      reason?: string;
      bytesIn: number;
      bytesOut: number;
      durationMs: number;
    }
  | {
      event: 'rate.limited';
      tenant: string;
      kind: 'createRun' | 'callTool';
      refused: number;
      since: string;
      windowMs: number;
    }
  | { event: 'auth.failed'; method: string; peer: string; reason: 'missing' | 'invalid' };

/** Argument names and sizes, never values. */
export interface ArgumentSummary {
  keys: string[];
  bytes: number;
}

const MAX_KEYS = 32;

export function summarizeForAudit(args: Record<string, unknown>, rawBytes: number): ArgumentSummary {
  const keys = Object.keys(args);
  return { keys: keys.slice(0, MAX_KEYS).map((k) => k.slice(0, 64)), bytes: rawBytes };
}

/** An append-only JSON-lines stream of AuditEvents, each stamped with the time. */
export class AuditLog {
  private readonly out: Writable;
  private readonly owned?: WriteStream;

  constructor(target: string | Writable) {
    if (typeof target !== 'string') this.out = target;
    else if (target === '-') this.out = process.stdout;
    else {
      this.owned = createWriteStream(target, { flags: 'a', mode: 0o600 });
      this.out = this.owned;
    }
  }

  write(e: AuditEvent): void {
    this.out.write(`${JSON.stringify({ time: new Date().toISOString(), ...e })}\n`);
  }

  close(): Promise<void> {
    const s = this.owned;
    if (!s) return Promise.resolve();
    return new Promise((resolve) => s.end(resolve));
  }
}
