import * as path from 'node:path';
import { promises as fs } from 'node:fs';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as tarFs from 'tar-fs';
import { confineTar } from './tarFilter';

/**
 * Unpacks an untrusted tar stream into a host workspace at a relative directory. The entries
 * pass through the same confinement as the container provider's (confineTar): anything that
 * would leave the workspace fails the whole call, loudly.
 */
export async function extractConfined(workspace: string, rel: string, tar: Readable): Promise<void> {
  const root = path.resolve(workspace);
  await fs.mkdir(root, { recursive: true });
  const confined = confineTar(tar, { prefix: rel, uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 });
  await pipeline(confined, tarFs.extract(root));
}

export function packConfined(dir: string, rel: string): Readable {
  const root = path.resolve(dir);
  const target = path.resolve(root, rel || '.');
  if (target !== root && !target.startsWith(root + path.sep)) throw new Error(`path escapes the workspace: ${rel}`);
  const base = path.dirname(target) === target ? target : target === root ? root : path.dirname(target);
  const entries = target === root ? undefined : [path.basename(target)];
  return tarFs.pack(base, { entries, dereference: false }) as unknown as Readable;
}
