import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

/** Whether the filesystem holding `dir` lets programs be executed from it (not mounted noexec). */
export async function allowsExec(dir: string, mountinfo = '/proc/self/mountinfo'): Promise<boolean> {
  let table: string;
  try {
    table = await fs.readFile(mountinfo, 'utf8');
  } catch {
    return true;
  }
  const target = path.resolve(dir);
  let best: { point: string; options: string[] } | undefined;
  for (const line of table.split('\n')) {
    const f = line.split(' ');
    if (f.length < 6) continue;
    // Mount points escape spaces and the like as octal.
    const point = f[4].replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    const inside = point === '/' || target === point || target.startsWith(`${point}/`);
    if (inside && (!best || point.length >= best.point.length)) best = { point, options: f[5].split(',') };
  }
  return !best?.options.includes('noexec');
}

/**
 * A private directory for what a session builds and runs (delve's binary). The temp dir when
 * programs may run from it; a sandbox mounts /tmp noexec, and then a hidden folder in the
 * project is used instead. Removed with the session either way.
 */
export async function makeScratchDir(projectRoot: string): Promise<string> {
  const tmp = os.tmpdir();
  if (await allowsExec(tmp)) return fs.mkdtemp(path.join(tmp, 'tether-debug-'));
  return fs.mkdtemp(path.join(projectRoot, '.tether-debug-'));
}
