import * as path from 'node:path';
import { invalid } from '../errors';

/** E2B's home directory: the SDKs' default place for files, here the run's workspace. */
export const E2B_HOME = '/home/user';

/**
 * An E2B path as the runner's fs and process families take it (workspace-relative): relative
 * paths, paths under E2B's home (`/home/user`, which the runner image links to the workspace)
 * and paths under the sandbox's own workspace path are the same files; anything else is outside
 * the run's workspace and refused at the edge.
 */
export function toWorkspace(p: string, workspacePath: string, what = 'path'): string {
  if (typeof p !== 'string' || p === '') throw invalid(`${what} must not be empty`);
  if (p.includes('\0')) throw invalid(`${what} contains a NUL byte`);
  const abs = path.posix.resolve(E2B_HOME, p.startsWith('~') ? E2B_HOME + p.slice(1) : p);
  for (const root of [E2B_HOME, workspacePath]) {
    if (abs === root) return '.';
    if (abs.startsWith(`${root}/`)) return abs.slice(root.length + 1);
  }
  throw invalid(`${what} is outside the sandbox's workspace (${E2B_HOME}): ${p}`);
}

/** A path the runner reports (absolute under the sandbox's workspace) as the SDKs expect it: under E2B's home. */
export function fromWorkspace(abs: string, workspacePath: string): string {
  if (abs === workspacePath) return E2B_HOME;
  if (abs.startsWith(`${workspacePath}/`)) return E2B_HOME + abs.slice(workspacePath.length);
  return abs;
}
