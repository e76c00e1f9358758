import type { ProcessSignalName, ProcessStartParams, PtySize } from '../../../../protocol/src/process';
import { Refusal } from './refusal';

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const SIGNALS = new Set<ProcessSignalName>(['SIGKILL', 'SIGTERM', 'SIGINT', 'SIGHUP']);
/** A terminal's size is two unsigned shorts (struct winsize). */
const MAX_PTY_SIDE = 65535;
/** Longest timeout a timer holds (setTimeout's limit, about 24.8 days). */
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** A start's parameters, checked: what the launch needs and what `list` reports. */
export interface StartSpec {
  cmd: string;
  args: string[];
  cwd: string | undefined;
  env: Record<string, string>;
  pty: PtySize | undefined;
  stdin: boolean;
  tag: string | undefined;
  timeoutMs: number;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The payload as an object; anything else is refused. */
export function payloadOf(p: unknown): Record<string, unknown> {
  if (!isObject(p)) throw new Refusal('invalid', 'the command needs an object of parameters');
  return p;
}

function noNul(s: string, what: string): string {
  if (s.includes('\0')) throw new Refusal('invalid', `${what} contains a NUL byte`);
  return s;
}

export function startSpec(raw: unknown): StartSpec {
  const p = payloadOf(raw) as Partial<Record<keyof ProcessStartParams, unknown>>;
  if (typeof p.cmd !== 'string' || p.cmd === '') throw new Refusal('invalid', 'cmd must be a non-empty string');
  const args = p.args ?? [];
  if (!Array.isArray(args) || !args.every((a) => typeof a === 'string'))
    throw new Refusal('invalid', 'args must be a list of strings');
  if (p.cwd !== undefined && (typeof p.cwd !== 'string' || p.cwd === ''))
    throw new Refusal('invalid', 'cwd must be a non-empty string');
  const env = p.env ?? {};
  if (!isObject(env)) throw new Refusal('invalid', 'env must be an object of strings');
  for (const [name, value] of Object.entries(env)) {
    if (!ENV_NAME.test(name))
      throw new Refusal('invalid', `env name ${JSON.stringify(name)} is not a valid name (letters, digits, _)`);
    if (typeof value !== 'string') throw new Refusal('invalid', `env ${name} must be a string`);
    noNul(value, `env ${name}`);
  }
  if (p.tag !== undefined && typeof p.tag !== 'string') throw new Refusal('invalid', 'tag must be a string');
  if (p.stdin !== undefined && typeof p.stdin !== 'boolean') throw new Refusal('invalid', 'stdin must be a boolean');
  const timeoutMs = p.timeoutMs ?? 0;
  if (typeof timeoutMs !== 'number' || !Number.isFinite(timeoutMs) || timeoutMs < 0 || timeoutMs > MAX_TIMEOUT_MS)
    throw new Refusal('invalid', `timeoutMs must be a number of milliseconds from 0 to ${MAX_TIMEOUT_MS}`);
  return {
    cmd: noNul(p.cmd, 'cmd'),
    args: (args as string[]).map((a) => noNul(a, 'an argument')),
    cwd: p.cwd === undefined ? undefined : (p.cwd as string),
    env: { ...(env as Record<string, string>) },
    pty: p.pty === undefined ? undefined : ptySize(p.pty),
    stdin: p.stdin === true,
    tag: p.tag as string | undefined,
    timeoutMs,
  };
}

export function ptySize(raw: unknown): PtySize {
  const s = isObject(raw) ? raw : {};
  const ok = (n: unknown): n is number => Number.isInteger(n) && (n as number) >= 1 && (n as number) <= MAX_PTY_SIDE;
  if (!ok(s.cols) || !ok(s.rows))
    throw new Refusal('invalid', `a PTY size needs whole cols and rows from 1 to ${MAX_PTY_SIDE}`);
  return { cols: s.cols, rows: s.rows };
}

export function pidOf(raw: Record<string, unknown>): number {
  const pid = raw.pid;
  if (!Number.isInteger(pid) || (pid as number) <= 0) throw new Refusal('invalid', 'pid must be a positive integer');
  return pid as number;
}

export function signalOf(raw: unknown): ProcessSignalName {
  if (typeof raw !== 'string' || !SIGNALS.has(raw as ProcessSignalName))
    throw new Refusal('invalid', `signal must be one of ${[...SIGNALS].join(', ')}`);
  return raw as ProcessSignalName;
}

/** Base64 input as bytes; anything that is not base64 is refused rather than half decoded. */
export function dataOf(raw: unknown): Buffer {
  if (typeof raw !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(raw) || raw.length % 4 === 1)
    throw new Refusal('invalid', 'data must be base64');
  return Buffer.from(raw, 'base64');
}
