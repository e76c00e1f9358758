import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import type { ServerSpec } from './servers';

/** Directories never searched for roots: dependencies and tool caches, not the project. */
const SKIP_DIRS = new Set(['node_modules', '.git', '.venv', 'venv', '__pycache__', '.cache', 'dist', 'build', 'target', 'vendor']);

async function isFile(p: string): Promise<boolean> {
  return fs.stat(p).then((s) => s.isFile() || s.isDirectory(), () => false);
}

/**
 * Finds the project root of a file for a server: the nearest directory, from the file upwards
 * but never above the workspace, that holds one of the server's root markers. Nearest wins,
 * so a Go module nested in a TypeScript repo gets its own root.
 */
export class RootDetector {
  constructor(private readonly workspaceRoot: string) {}

  async rootFor(absFile: string, server: ServerSpec): Promise<string | undefined> {
    let dir = path.dirname(absFile);
    for (;;) {
      for (const m of server.rootMarkers) if (await isFile(path.join(dir, m))) return dir;
      if (dir === this.workspaceRoot || !dir.startsWith(this.workspaceRoot + path.sep)) return undefined;
      dir = path.dirname(dir);
    }
  }

  /** Every root of the workspace for a server (bounded walk), for `status`. */
  async allRoots(server: ServerSpec, maxDepth = 4, maxDirs = 2000): Promise<string[]> {
    const found: string[] = [];
    let budget = maxDirs;
    const walk = async (dir: string, depth: number): Promise<void> => {
      if (budget-- <= 0) return;
      let entries: import('node:fs').Dirent[];
      try {
        entries = await fs.readdir(dir, { withFileTypes: true });
      } catch {
        return;
      }
      if (entries.some((e) => server.rootMarkers.includes(e.name))) found.push(dir);
      if (depth >= maxDepth) return;
      for (const e of entries) {
        if (e.isDirectory() && !SKIP_DIRS.has(e.name) && !e.name.startsWith('.')) await walk(path.join(dir, e.name), depth + 1);
      }
    };
    await walk(this.workspaceRoot, 0);
    return found;
  }
}
