import * as path from 'node:path';
import { findMarkerUp, findMarkersDown } from '../../util/rootMarkers';
import type { ServerSpec } from './servers';

/** Project roots for a language server: the folders holding one of its root markers. */
export class RootDetector {
  constructor(private readonly workspaceRoot: string) {}

  /** The nearest root from the file upwards, never above the workspace. */
  async rootFor(absFile: string, server: ServerSpec): Promise<string | undefined> {
    return (await findMarkerUp(this.workspaceRoot, path.dirname(absFile), server.rootMarkers))?.dir;
  }

  /** Every root of the workspace for a server (bounded walk), for `status`. */
  async allRoots(server: ServerSpec, maxDepth = 4, maxDirs = 2000): Promise<string[]> {
    const hits = await findMarkersDown(this.workspaceRoot, server.rootMarkers, { maxDepth, maxDirs });
    return [...new Set(hits.map((h) => h.dir))];
  }
}
