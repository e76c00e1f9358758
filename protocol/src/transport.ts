/**
 * How a connection to a runner begins, before any JSON-RPC: the boot line the gateway writes
 * on the runner's stdin, the hello line the runner answers on its stdout, and the mutual
 * challenge every socket connection passes. Both sides prove they hold the run's secret
 * without ever sending it over a socket, so a process in the run that puts its own socket in
 * the runner's place learns nothing it can use.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { RequestType0 } from 'vscode-jsonrpc';

/** gateway → runner, first line on stdin (the only time the secret is sent). */
export interface BootLine {
  /** The run's secret, hex. */
  secret: string;
  /** Where the runner should listen besides its stdio. */
  listen: { unix?: string; tcp?: { host: string; port: number } };
  /**
   * End the whole run when the kernel OOM-kills any process in the runner's memory cgroup (a
   * kernel, a language server), as Kubernetes on cgroup v2 does (`memory.oom.group`), leaving
   * why in `messagePath` (the container's `terminationMessagePath`) and exiting with
   * `OOM_EXIT_CODE`. Absent: an OOM kill ends only its victim.
   */
  oomExit?: { messagePath: string };
}

/** The runner's exit code when it ended the run for an OOM kill in its cgroup (`BootLine.oomExit`). */
export const OOM_EXIT_CODE = 86;
/** How the termination message of that exit begins, whoever reads it (Kubernetes' own reason word). */
export const OOM_MESSAGE_PREFIX = 'OOMKilled';

/** runner → gateway, first line on stdout. */
export interface HelloLine {
  pid: number;
  /** What the runner listens on; absent where listening failed (see `errors`). */
  listening: { unix?: string; tcp?: { host: string; port: number } };
  /** Why a requested listener could not be opened. */
  errors: string[];
}

/** The greeting that opens the challenge; also names the version of the exchange. */
export const GREETING = 'tether-runner/1';
/** The longest line either side accepts before the session starts. */
export const MAX_PREAMBLE_LINE = 4096;
/** How long a connection may take to authenticate before it is closed. */
export const HANDSHAKE_TIMEOUT_MS = 5000;

export function nonce(): string {
  return randomBytes(16).toString('hex');
}

/** The proof one side gives: an HMAC of both nonces, bound to its role. */
export function proof(secret: Buffer, role: 'runner' | 'gateway', clientNonce: string, runnerNonce: string): string {
  return createHmac('sha256', secret).update(`${role}\n${clientNonce}\n${runnerNonce}`).digest('hex');
}

export function proofMatches(
  secret: Buffer,
  role: 'runner' | 'gateway',
  clientNonce: string,
  runnerNonce: string,
  given: string,
): boolean {
  const want = Buffer.from(proof(secret, role, clientNonce, runnerNonce), 'hex');
  const got = Buffer.from(/^[0-9a-f]{64}$/.test(given) ? given : '', 'hex');
  return got.length === want.length && timingSafeEqual(got, want);
}

/** A hex token: nonces are 32 hex digits. */
export function isNonce(s: string): boolean {
  return /^[0-9a-f]{32}$/.test(s);
}

/** gateway → runner: the run's id once initialized, so a second connection knows what it reached. */
export namespace PingRequest {
  export const type = new RequestType0<{ runId: string | null; connections: number }, void>('runner/ping');
}

/**
 * gateway → runner, before a memory checkpoint of its sandbox: the runner answers, then closes
 * every socket connection and its listeners (gVisor does not save a sandbox holding a connected
 * host Unix socket, google/gvisor#10897). It opens its listeners again on `QUIESCE_WAKE_SIGNAL`,
 * which the gateway sends once the sandbox is restored (or the checkpoint failed).
 */
export namespace QuiesceRequest {
  export const type = new RequestType0<{ closing: number }, void>('runner/quiesce');
}

/** The signal that has a quiesced runner listen again (PID 1 passes it on to the runner). */
export const QUIESCE_WAKE_SIGNAL = 'SIGUSR2';

/** What the runner's own cgroup says its sandbox uses (memory without droppable cache, CPU time, workspace blocks). */
export interface UsageResult {
  memoryBytes: number;
  cpuMillis: number;
  diskBytes: number;
}

/**
 * gateway → runner: the sandbox's usage as the runner reads it from its own cgroup, for
 * providers that have no cheaper way to it (`ProviderCapabilities.usageFromRunner`). Fails
 * where no memory and CPU cgroup is mounted for the runner.
 */
export namespace UsageRequest {
  export const type = new RequestType0<UsageResult, void>('runner/usage');
}
