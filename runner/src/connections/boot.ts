import type { Readable } from 'node:stream';
import type { BootLine } from '../../../protocol/src/transport';
import { MAX_PREAMBLE_LINE } from '../../../protocol/src/transport';
import { readLine } from '../../../protocol/src/lines';

export interface Boot {
  /** The run's secret; held in memory only, never in the environment or a file. */
  secret: Buffer;
  listen: BootLine['listen'];
  oomExit?: { messagePath: string };
}

/**
 * Reads the gateway's boot line from the runner's own stdin. Code the tools run gets its own
 * stdio, so once this line is consumed nothing in the run can read it again.
 */
export async function readBoot(stdin: Readable): Promise<Boot> {
  const line = await readLine(stdin, MAX_PREAMBLE_LINE);
  let parsed: Partial<BootLine>;
  try {
    parsed = JSON.parse(line.toString('utf8')) as Partial<BootLine>;
  } catch {
    throw new Error('the first line on stdin is not the boot line');
  } finally {
    line.fill(0);
  }
  if (typeof parsed.secret !== 'string' || !/^[0-9a-f]{64}$/.test(parsed.secret))
    throw new Error('the boot line carries no valid secret');
  const secret = Buffer.from(parsed.secret, 'hex');
  parsed.secret = undefined;
  const listen: BootLine['listen'] = {};
  const l = parsed.listen ?? {};
  if (typeof l.unix === 'string' && l.unix.startsWith('/')) listen.unix = l.unix;
  if (l.tcp && typeof l.tcp.host === 'string' && Number.isInteger(l.tcp.port))
    listen.tcp = { host: l.tcp.host, port: l.tcp.port };
  const oom = parsed.oomExit;
  const oomExit =
    oom && typeof oom.messagePath === 'string' && oom.messagePath.startsWith('/')
      ? { messagePath: oom.messagePath }
      : undefined;
  return { secret, listen, oomExit };
}
