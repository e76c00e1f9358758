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
    ignore: (name: string, header?: { type?: string | null; linkname?: string | null }) => {
      const target = path.resolve(name);
      if (!inside(target)) {
        refused ??= `entry leaves the workspace: ${path.relative(root, target)}`;
        return true;
      }
      const type = header?.type ?? 'file';
      if (type === 'symlink' || type === 'link') {
        const link = header?.linkname ?? '';
        const dest = type === 'symlink' ? path.resolve(path.dirname(target), link) : path.resolve(root, link);
        if (path.isAbsolute(link) && type === 'symlink') {
          refused ??= `absolute symlink refused: ${path.relative(root, target)} -> ${link}`;
          return true;
        }
        if (!inside(dest)) {
          refused ??= `link leaves the workspace: ${path.relative(root, target)} -> ${link}`;
          return true;
        }
      }
      if (type !== 'file' && type !== 'directory' && type !== 'symlink' && type !== 'link') return true;
      return false;
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
