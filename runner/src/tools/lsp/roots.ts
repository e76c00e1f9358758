import * as path from 'node:path';
import { findMarkerUp, findMarkersDown } from '../../util/rootMarkers';
import type { ServerSpec } from './servers';

/** Project roots for a language server: the folders holding one of its root markers. */
export class RootDetector {
  constructor(private readonly workspaceRoot: string) {}

  /**
   * The nearest root from the file upwards, never above the workspace; the workspace itself
   * for a server that serves files one by one (`rootFallback: 'workspace'`) when none is found.
   */
  async rootFor(absFile: string, server: ServerSpec): Promise<string | undefined> {
    const found = (await findMarkerUp(this.workspaceRoot, path.dirname(absFile), server.rootMarkers))?.dir;
    return found ?? (server.rootFallback === 'workspace' ? this.workspaceRoot : undefined);
  }

  /** Every root of the workspace for a server (bounded walk), for `status`. */
  async allRoots(server: ServerSpec, maxDepth = 4, maxDirs = 2000): Promise<string[]> {
    const hits = await findMarkersDown(this.workspaceRoot, server.rootMarkers, { maxDepth, maxDirs });
    const roots = [...new Set(hits.map((h) => h.dir))];
    return roots.length === 0 && server.rootFallback === 'workspace' ? [this.workspaceRoot] : roots;
  }
}
