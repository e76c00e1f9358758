import { createHmac, randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { readLine } from '../../../protocol/src/lines';
import { MAX_PREAMBLE_LINE, type BootLine, type HelloLine } from '../../../protocol/src/transport';

const keys = new Map<string, Promise<Buffer>>();

/** The gateway's transport key: made once per state directory, readable by the gateway only. */
function transportKey(stateDir: string): Promise<Buffer> {
  let key = keys.get(stateDir);
  if (!key) {
    key = (async () => {
      const file = path.join(stateDir, 'transport.key');
      await fs.mkdir(stateDir, { recursive: true });
      try {
        await fs.writeFile(file, randomBytes(32).toString('hex'), { mode: 0o600, flag: 'wx' });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      return Buffer.from((await fs.readFile(file, 'utf8')).trim(), 'hex');
    })();
    keys.set(stateDir, key);
    key.catch(() => keys.delete(stateDir));
  }
  return key;
}

/**
 * A run's secret, derived from the gateway's key and the run's id: a restarted gateway, or
 * another one sharing the state directory, knows it again without storing it anywhere the
 * run could reach.
 */
export async function runSecret(stateDir: string, runId: string): Promise<Buffer> {
  return createHmac('sha256', await transportKey(stateDir))
    .update(runId)
    .digest();
}

/** Hands the runner its boot line on stdin and reads its hello from stdout. */
export async function bootRunner(
  stdin: Writable,
  stdout: Readable,
  secret: Buffer,
  listen: BootLine['listen'],
  timeoutMs: number,
  options: Pick<BootLine, 'oomExit'> = {},
): Promise<HelloLine> {
  const boot: BootLine = { secret: secret.toString('hex'), listen, ...options };
  stdin.write(`${JSON.stringify(boot)}\n`);
  const line = await readLine(stdout, MAX_PREAMBLE_LINE, timeoutMs);
  const hello = JSON.parse(line.toString('utf8')) as HelloLine;
  return { pid: hello.pid, listening: hello.listening ?? {}, errors: Array.isArray(hello.errors) ? hello.errors : [] };
}

/** Where a run's socket directory lives on the gateway's side. */
export function socketDir(stateDir: string, runId: string): string {
  return path.join(stateDir, 'sockets', runId);
}
