import * as path from 'node:path';
import { promises as fs } from 'node:fs';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as tarFs from 'tar-fs';

/**
 * Unpacks a tar stream under `dir`, refusing entries that would land outside it: absolute
 * names, `..`, links whose target leaves the directory, and device files.
 */
export async function extractConfined(dir: string, tar: Readable): Promise<void> {
  const root = path.resolve(dir);
  await fs.mkdir(root, { recursive: true });
  const inside = (p: string) => p === root || p.startsWith(root + path.sep);
  let refused: string | undefined;
  const extract = tarFs.extract(root, {
    // tar-fs would quietly re-root a "../x" entry; a client should hear that it was refused.
    ignore: (_name: string, header?: { name?: string; type?: string | null; linkname?: string | null }) => {
      const raw = header?.name ?? '';
      const target = path.resolve(root, raw);
      if (path.isAbsolute(raw) || !inside(target)) {
        refused ??= `entry leaves the workspace: ${raw}`;
        return true;
      }
      const type = header?.type ?? 'file';
      if (type === 'symlink' || type === 'link') {
        const link = header?.linkname ?? '';
        const dest = type === 'symlink' ? path.resolve(path.dirname(target), link) : path.resolve(root, link);
        if (path.isAbsolute(link) || !inside(dest)) {
          refused ??= `${type === 'symlink' ? 'symlink' : 'hard link'} leaves the workspace: ${raw} -> ${link}`;
          return true;
        }
        return false;
      }
      // Devices, FIFOs and the like have no business in a workspace.
      return type !== 'file' && type !== 'directory';
    },
    dmode: 0o755 & ~0o022,
    fmode: 0o644 & ~0o022,
  } as tarFs.ExtractOptions);
  await pipeline(tar, extract);
  if (refused) throw new Error(refused);
}

export function packConfined(dir: string, rel: string): Readable {
  const root = path.resolve(dir);
  const target = path.resolve(root, rel || '.');
  if (target !== root && !target.startsWith(root + path.sep)) throw new Error(`path escapes the workspace: ${rel}`);
  const base = path.dirname(target) === target ? target : target === root ? root : path.dirname(target);
  const entries = target === root ? undefined : [path.basename(target)];
  return tarFs.pack(base, { entries, dereference: false }) as unknown as Readable;
}
