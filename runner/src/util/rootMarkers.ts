import { promises as fs, type Dirent } from 'node:fs';
import * as path from 'node:path';

export interface MarkerHit {
  /** Absolute directory holding the marker: a project root. */
  dir: string;
  marker: string;
}

/** Dependencies, build output and tool caches: never where a project's root is. Hidden folders are skipped too. */
const SKIP_DIRS = new Set([
  'node_modules',
  '.git',
  '.venv',
  'venv',
  '__pycache__',
  '.cache',
  '.dart_tool',
  'dist',
  'build',
  'target',
  'vendor',
]);

/** A marker is a file or a folder (`.clangd` may be either). */
async function exists(p: string): Promise<boolean> {
  return fs.stat(p).then(
    (s) => s.isFile() || s.isDirectory(),
    () => false,
  );
}

/**
 * The nearest directory from `fromDir` up to `root` (inclusive) that holds one of the
 * markers. Nearest wins, so a Go module nested in a TypeScript repo is its own root; a
 * marker above `root` never counts, and a `fromDir` outside it finds nothing.
 */
export async function findMarkerUp(
  root: string,
  fromDir: string,
  markers: readonly string[],
): Promise<MarkerHit | undefined> {
  let dir = path.resolve(fromDir);
  const top = path.resolve(root);
  if (dir !== top && !dir.startsWith(top + path.sep)) return undefined;
  for (;;) {
    for (const marker of markers) if (await exists(path.join(dir, marker))) return { dir, marker };
    if (dir === top) return undefined;
    dir = path.dirname(dir);
  }
}

/**
 * Markers in `root` and the folders below it, shallowest first, bounded by depth and by the
 * number of folders read so that a huge tree costs little.
 */
export async function findMarkersDown(
  root: string,
  markers: readonly string[],
  bounds: { maxDepth?: number; maxDirs?: number } = {},
): Promise<MarkerHit[]> {
  const { maxDepth = 2, maxDirs = 500 } = bounds;
  const hits: MarkerHit[] = [];
  let level = [path.resolve(root)];
  let visited = 0;
  for (let depth = 0; depth <= maxDepth && level.length > 0; depth++) {
    const next: string[] = [];
    for (const dir of level) {
      if (++visited > maxDirs) return hits;
      let entries: Dirent[];
      try {
        entries = await fs.readdir(dir, { withFileTypes: true });
      } catch {
        continue;
      }
      for (const e of entries) {
        if (markers.includes(e.name)) hits.push({ dir, marker: e.name });
        else if (e.isDirectory() && !SKIP_DIRS.has(e.name) && !e.name.startsWith('.'))
          next.push(path.join(dir, e.name));
      }
    }
    level = next;
  }
  return hits;
}
