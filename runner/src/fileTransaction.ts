import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { randomBytes } from 'node:crypto';
import { ToolError } from './tool';

/** One file of a multi-file change. Paths are absolute and already confined by Workspace. */
export interface FileChange {
  path: string;
  /** The content the change was computed against; null means the file must not exist. */
  expected: string | null;
  /** The new content; null deletes the file. */
  next: string | null;
}

async function readOrNull(p: string): Promise<string | null> {
  try {
    return await fs.readFile(p, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

export class ConflictError extends ToolError {
  constructor(
    readonly files: string[],
    describe: (p: string) => string,
  ) {
    super(
      `nothing was written: ${files.length} file(s) changed since the edit was computed: ${files.map(describe).join(', ')}`,
      { conflicts: files.map(describe) },
    );
  }
}

/**
 * Applies several file changes as one: every file is checked against the content the change
 * was computed from, all new contents are staged to temp files, then renamed into place. If
 * any step fails, files already replaced are restored, so the tree is never half-changed.
 */
export async function commitChanges(changes: FileChange[], describe: (p: string) => string = (p) => p): Promise<void> {
  const seen = new Set<string>();
  for (const c of changes) {
    if (seen.has(c.path)) throw new Error(`file ${describe(c.path)} appears twice in one change`);
    seen.add(c.path);
  }
  const originals = new Map<string, string | null>();
  const conflicts: string[] = [];
  for (const c of changes) {
    const current = await readOrNull(c.path);
    originals.set(c.path, current);
    if (current !== c.expected) conflicts.push(c.path);
  }
  if (conflicts.length > 0) throw new ConflictError(conflicts, describe);

  const staged: { change: FileChange; tmp: string | null; mode: number }[] = [];
  try {
    for (const c of changes) {
      if (c.next === null) {
        staged.push({ change: c, tmp: null, mode: 0 });
        continue;
      }
      await fs.mkdir(path.dirname(c.path), { recursive: true });
      let mode = 0o644;
      try {
        mode = (await fs.stat(c.path)).mode & 0o7777;
      } catch {
        /* new file */
      }
      const tmp = path.join(
        path.dirname(c.path),
        `.${path.basename(c.path)}.tether-${randomBytes(6).toString('hex')}.tmp`,
      );
      await fs.writeFile(tmp, c.next, { mode, flag: 'wx' });
      staged.push({ change: c, tmp, mode });
    }
  } catch (err) {
    await Promise.all(staged.map((s) => (s.tmp ? fs.rm(s.tmp, { force: true }) : undefined)));
    throw new ToolError(`nothing was written: staging failed: ${(err as Error).message}`);
  }

  const done: FileChange[] = [];
  try {
    for (const s of staged) {
      // Renaming over a read-only file succeeds when its directory is writable (and root may
      // write anything), which would defeat a deliberate lock: a file without write bits is locked.
      if (s.change.expected !== null && ((await fs.stat(s.change.path)).mode & 0o222) === 0) {
        throw new Error(`${describe(s.change.path)} is read-only`);
      }
      if (s.tmp) await fs.rename(s.tmp, s.change.path);
      else await fs.rm(s.change.path);
      done.push(s.change);
    }
  } catch (err) {
    const failures: string[] = [];
    for (const c of done.reverse()) {
      const original = originals.get(c.path) ?? null;
      try {
        if (original === null) await fs.rm(c.path, { force: true });
        else await fs.writeFile(c.path, original);
      } catch {
        failures.push(describe(c.path));
      }
    }
    await Promise.all(staged.map((s) => (s.tmp ? fs.rm(s.tmp, { force: true }) : undefined)));
    const rolled = failures.length === 0 ? 'every file was restored' : `could not restore: ${failures.join(', ')}`;
    throw new ToolError(`nothing was written: ${(err as Error).message} (${rolled})`);
  }
}
