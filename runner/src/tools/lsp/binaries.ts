import { promises as fs, constants as fsc } from 'node:fs';
import * as path from 'node:path';

/** Project-local tool folders, searched before $PATH: the project's own versions win. */
const LOCAL_BIN_DIRS = ['node_modules/.bin', '.venv/bin', 'venv/bin'];

async function executable(p: string): Promise<boolean> {
  try {
    await fs.access(p, fsc.X_OK);
    return (await fs.stat(p)).isFile();
  } catch {
    return false;
  }
}

/**
 * Resolves an executable for a root: project-local folders of the root and of each parent up
 * to the workspace, then $PATH. Returns undefined when nothing is found.
 */
export async function resolveBinary(
  command: string,
  root: string,
  workspaceRoot: string,
  envPath = process.env.PATH ?? '',
): Promise<string | undefined> {
  for (let dir = root; dir === workspaceRoot || dir.startsWith(workspaceRoot + path.sep); dir = path.dirname(dir)) {
    for (const local of LOCAL_BIN_DIRS) {
      const candidate = path.join(dir, local, command);
      if (await executable(candidate)) return candidate;
    }
    if (dir === workspaceRoot) break;
  }
  for (const d of envPath.split(path.delimiter).filter(Boolean)) {
    const candidate = path.join(d, command);
    if (await executable(candidate)) return candidate;
  }
  return undefined;
}
