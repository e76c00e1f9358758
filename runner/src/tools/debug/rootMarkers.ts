import { promises as fs } from 'node:fs';
import * as path from 'node:path';

export interface MarkerHit {
  /** Absolute directory holding the marker: the project root for the adapter. */
  dir: string;
  marker: string;
}

async function hasFile(file: string): Promise<boolean> {
  try {
    return (await fs.stat(file)).isFile();
  } catch {
    return false;
  }
}

/** The nearest directory from `fromDir` up to `root` (inclusive) that holds one of the markers. */
export async function findMarkerUp(root: string, fromDir: string, markers: readonly string[]): Promise<MarkerHit | undefined> {
  let dir = path.resolve(fromDir);
  const top = path.resolve(root);
  if (dir !== top && !dir.startsWith(top + path.sep)) return undefined;
  for (;;) {
    for (const marker of markers) if (await hasFile(path.join(dir, marker))) return { dir, marker };
    if (dir === top) return undefined;
    dir = path.dirname(dir);
  }
}

const SKIP_DIRS = new Set(['.git', 'node_modules', '.venv', 'venv', '__pycache__', 'target', 'build', 'dist', '.dart_tool']);

/**
 * Markers in the workspace root and a few levels below it (a project may live in a
 * subfolder of the checkout), breadth first, bounded so a huge tree costs little.
 */
export async function findMarkersDown(root: string, markers: readonly string[], maxDepth = 2, maxDirs = 500): Promise<MarkerHit[]> {
  const hits: MarkerHit[] = [];
  let level = [path.resolve(root)];
  let visited = 0;
  for (let depth = 0; depth <= maxDepth && level.length > 0; depth++) {
    const next: string[] = [];
    for (const dir of level) {
      if (++visited > maxDirs) return hits;
      let entries: import('node:fs').Dirent[];
      try {
        entries = await fs.readdir(dir, { withFileTypes: true });
      } catch {
        continue;
      }
      for (const e of entries) {
        if (e.isFile() && markers.includes(e.name)) hits.push({ dir, marker: e.name });
        else if (e.isDirectory() && !SKIP_DIRS.has(e.name) && !e.name.startsWith('.')) next.push(path.join(dir, e.name));
      }
    }
    level = next;
  }
  return hits;
}
