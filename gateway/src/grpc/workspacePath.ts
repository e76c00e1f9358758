import * as path from 'node:path';
import { invalid } from '../errors';

/** Normalises a workspace-relative path from a request; refuses escapes. */
export function workspaceRelative(p: string): string {
  if (p.includes('\0')) throw invalid('path contains a NUL byte');
  if (path.isAbsolute(p)) throw invalid(`path must be relative to the workspace: ${p}`);
  const norm = path.posix.normalize(p || '.');
  if (norm === '..' || norm.startsWith('../')) throw invalid(`path escapes the workspace: ${p}`);
  return norm === '.' ? '' : norm.replace(/\/$/, '');
}
