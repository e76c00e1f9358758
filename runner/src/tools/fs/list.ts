import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { FS_LIST_MAX_ENTRIES, type FsEntry } from '../../../../protocol/src/fs';
import { entryOf } from './entries';
import type { Owners } from './owners';
import type { FsPaths } from './paths';

/**
 * The entries under a directory, `depth` levels down, level by level (each directory's names
 * sorted): symlinks are listed, never followed; the reserved `.tether-run/` is never listed;
 * a subdirectory that cannot be read is left out. Stops at `max` entries, saying so.
 */
export async function listTree(
  dir: string,
  depth: number,
  paths: FsPaths,
  owners: Owners,
  max = FS_LIST_MAX_ENTRIES,
): Promise<{ entries: FsEntry[]; truncated: boolean }> {
  const entries: FsEntry[] = [];
  let level: string[] = [dir];
  for (let d = 1; d <= depth && level.length > 0; d++) {
    const next: string[] = [];
    for (const parent of level) {
      let names: string[];
      try {
        names = await namesIn(parent, max - entries.length + 1);
      } catch (err) {
        if (parent === dir) throw err;
        continue;
      }
      const kept = names.map((n) => path.join(parent, n)).filter((p) => !paths.reserved(p));
      const found = await Promise.all(kept.map((p) => entryOf(p, paths, owners).catch(() => undefined)));
      for (let i = 0; i < kept.length; i++) {
        const e = found[i];
        if (!e) continue; // gone meanwhile
        if (entries.length === max) return { entries, truncated: true };
        entries.push(e);
        if (e.type === 'dir') next.push(kept[i]);
      }
    }
    level = next;
  }
  return { entries, truncated: false };
}

/** Up to `limit` names of a directory, sorted, read without holding the whole of a huge one. */
async function namesIn(dir: string, limit: number): Promise<string[]> {
  const names: string[] = [];
  const handle = await fs.opendir(dir);
  try {
    for await (const d of handle) {
      names.push(d.name);
      if (names.length >= limit) break;
    }
  } finally {
    await handle.close().catch(() => undefined);
  }
  return names.sort();
}
