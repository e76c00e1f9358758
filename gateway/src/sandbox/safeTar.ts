import * as path from 'node:path';
import { createReadStream, promises as fs } from 'node:fs';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as tarFs from 'tar-fs';
import { withConfinedArchive } from './tarFilter';

/**
 * Unpacks an untrusted tar stream into a host workspace at a relative directory, all or
 * nothing, through the same confinement as the container provider's.
 */
export async function extractConfined(workspace: string, rel: string, tar: Readable): Promise<void> {
  const root = path.resolve(workspace);
  await fs.mkdir(root, { recursive: true });
  const owner = { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
  await withConfinedArchive(tar, { prefix: rel, ...owner }, (spooled) =>
    pipeline(createReadStream(spooled), tarFs.extract(root)),
  );
}

export function packConfined(dir: string, rel: string): Readable {
  const root = path.resolve(dir);
  const target = path.resolve(root, rel || '.');
  if (target !== root && !target.startsWith(root + path.sep)) throw new Error(`path escapes the workspace: ${rel}`);
  const base = path.dirname(target) === target ? target : target === root ? root : path.dirname(target);
  const entries = target === root ? undefined : [path.basename(target)];
  return tarFs.pack(base, { entries, dereference: false }) as unknown as Readable;
}
