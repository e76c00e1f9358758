import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import ignore, { type Ignore } from 'ignore';

export interface WalkedFile {
  abs: string;
  size: number;
  mtimeMs: number;
}

export interface WalkResult {
  files: WalkedFile[];
  /** Files left out because they are larger than the limit. */
  tooLarge: number;
}

interface IgnoreScope {
  dir: string;
  rules: Ignore;
}

async function readGitignore(dir: string): Promise<IgnoreScope | undefined> {
  try {
    const text = await fs.readFile(path.join(dir, '.gitignore'), 'utf8');
    return { dir, rules: ignore().add(text) };
  } catch {
    return undefined;
  }
}

function ignored(scopes: IgnoreScope[], abs: string, isDir: boolean): boolean {
  for (const s of scopes) {
    const rel = path.relative(s.dir, abs).split(path.sep).join('/');
    if (rel && s.rules.ignores(isDir ? rel + '/' : rel)) return true;
  }
  return false;
}

/**
 * Lists the files under `root` the way a developer would search them: `.gitignore` rules
 * (at every level) are respected, hidden entries and `.git` are skipped, symlinks are not
 * followed (they could lead outside the workspace), and files above `maxBytes` are counted
 * instead of listed. `accept` filters by name before any stat.
 */
export async function walkFiles(root: string, accept: (name: string) => boolean, maxBytes: number, signal?: AbortSignal): Promise<WalkResult> {
  const files: WalkedFile[] = [];
  let tooLarge = 0;
  const visit = async (dir: string, scopes: IgnoreScope[]): Promise<void> => {
    signal?.throwIfAborted();
    const own = await readGitignore(dir);
    const here = own ? [...scopes, own] : scopes;
    let entries;
    try {
      entries = await fs.readdir(dir, { withFileTypes: true });
    } catch {
      return;
    }
    const subdirs: string[] = [];
    const candidates: string[] = [];
    for (const e of entries) {
      if (e.name.startsWith('.')) continue;
      const abs = path.join(dir, e.name);
      if (e.isDirectory()) {
        if (!ignored(here, abs, true)) subdirs.push(abs);
      } else if (e.isFile() && accept(e.name) && !ignored(here, abs, false)) {
        candidates.push(abs);
      }
    }
    const stats = await Promise.all(candidates.map((abs) => fs.stat(abs).catch(() => undefined)));
    stats.forEach((st, i) => {
      if (!st) return;
      if (st.size > maxBytes) tooLarge++;
      else files.push({ abs: candidates[i], size: st.size, mtimeMs: st.mtimeMs });
    });
    for (const sub of subdirs) await visit(sub, here);
  };
  await visit(root, []);
  return { files, tooLarge };
}
