import { promises as fs, type Stats } from 'node:fs';
import * as path from 'node:path';
import type { FsEntry, FsEntryType } from '../../../../protocol/src/fs';
import type { Owners } from './owners';
import type { FsPaths } from './paths';

function typeOf(st: Stats): FsEntryType {
  if (st.isFile()) return 'file';
  if (st.isDirectory()) return 'dir';
  if (st.isSymbolicLink()) return 'symlink';
  return 'other';
}

/** One entry as the family reports it: the path itself (a symlink is not followed). */
export async function entryOf(real: string, paths: FsPaths, owners: Owners): Promise<FsEntry> {
  const st = await fs.lstat(real);
  const shown = paths.shown(real);
  const entry: FsEntry = {
    name: path.basename(shown),
    path: shown,
    type: typeOf(st),
    size: st.size,
    mode: st.mode,
    owner: owners.user(st.uid),
    group: owners.groupName(st.gid),
    mtimeMs: Math.floor(st.mtimeMs),
  };
  if (st.isSymbolicLink()) entry.symlinkTarget = await fs.readlink(real).catch(() => '');
  return entry;
}
