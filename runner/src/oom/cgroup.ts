import { closeSync, openSync, readFileSync, readSync } from 'node:fs';
import * as path from 'node:path';

/** The files of the runner's own memory cgroup that say how often the kernel OOM-killed in it. */
export interface OomCounter {
  version: 1 | 2;
  /** Holds the `oom_kill N` line: `memory.oom_control` (v1) or `memory.events` (v2). */
  file: string;
  /** Holds the cgroup's memory limit: `memory.limit_in_bytes` (v1) or `memory.max` (v2). */
  limitFile: string;
}

export interface Mount {
  root: string;
  mountPoint: string;
  fsType: string;
  superOptions: string[];
}

/** mountinfo escapes space, tab, newline and backslash in paths as octal. */
const unescapeOctal = (s: string) =>
  s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));

export function parseMountinfo(text: string): Mount[] {
  const mounts: Mount[] = [];
  for (const line of text.split('\n')) {
    const sep = line.indexOf(' - ');
    if (sep < 0) continue;
    const left = line.slice(0, sep).split(' ');
    const right = line.slice(sep + 3).split(' ');
    if (left.length < 5 || right.length < 3) continue;
    mounts.push({
      root: unescapeOctal(left[3]),
      mountPoint: unescapeOctal(left[4]),
      fsType: right[0],
      superOptions: right[2].split(','),
    });
  }
  return mounts;
}

/**
 * The process's cgroup in each hierarchy, from /proc/self/cgroup (`id:controllers:path`): the
 * memory controller's (v1), every v1 controller's by name, and the unified one (v2).
 */
export function parseProcCgroup(text: string): { v1Memory?: string; v2?: string; v1: Record<string, string> } {
  const out: { v1Memory?: string; v2?: string; v1: Record<string, string> } = { v1: {} };
  for (const line of text.split('\n')) {
    const m = /^(\d+):([^:]*):(.*)$/.exec(line.trim());
    if (!m) continue;
    if (m[1] === '0' && m[2] === '') out.v2 = m[3];
    else for (const c of m[2].split(',')) if (c) out.v1[c] = m[3];
    if (m[2].split(',').includes('memory')) out.v1Memory = m[3];
  }
  return out;
}

/**
 * Where a cgroup is seen through a mount of its hierarchy. A container sees its own cgroup
 * mounted (the mount's root is that cgroup, or `/` under a cgroup namespace); a host sees the
 * whole hierarchy and the cgroup below it.
 */
export function cgroupDir(mount: Mount, cgroup: string): string {
  if (mount.root === '/') return path.posix.join(mount.mountPoint, cgroup);
  if (cgroup === mount.root || cgroup.startsWith(`${mount.root}/`))
    return path.posix.join(mount.mountPoint, cgroup.slice(mount.root.length));
  // A bind mount of another cgroup than the one /proc names (a container without a cgroup
  // namespace whose runtime mounted its own cgroup there): what is mounted is the container's.
  return mount.mountPoint;
}

/** How many OOM kills a counter file has recorded; undefined when it has no such line. */
export function readOomKills(file: string): number | undefined {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
  return oomKillsIn(text);
}

function oomKillsIn(text: string): number | undefined {
  const m = /^oom_kill (\d+)$/m.exec(text);
  return m ? Number(m[1]) : undefined;
}

/**
 * Reads a counter file again and again through one descriptor, as `readOomKills` reads it
 * once. A read at offset 0 makes the kernel generate a cgroup file anew, so each check is one
 * `pread`, where opening the file each time took an open, a stat, two reads and a close: the
 * check runs before every answer the runner sends.
 */
export class OomKillsReader {
  private fd: number | undefined;
  private buf = Buffer.allocUnsafe(4096);

  constructor(readonly file: string) {}

  read(): number | undefined {
    try {
      this.fd ??= openSync(this.file, 'r');
      let n = 0;
      for (;;) {
        const room = this.buf.length - n;
        const got = readSync(this.fd, this.buf, n, room, n);
        n += got;
        // A short read is the end: a cgroup file is generated whole on the first read.
        if (got < room) break;
        const bigger = Buffer.allocUnsafe(this.buf.length * 2);
        this.buf.copy(bigger);
        this.buf = bigger;
      }
      return oomKillsIn(this.buf.toString('latin1', 0, n));
    } catch {
      // Opened again next time; this time the file as a fresh open shows it.
      this.close();
      return readOomKills(this.file);
    }
  }

  close(): void {
    if (this.fd === undefined) return;
    try {
      closeSync(this.fd);
    } catch {
      // Already gone: nothing held.
    }
    this.fd = undefined;
  }
}

/** A cgroup's memory limit as Kubernetes writes it (`512Mi`); undefined when there is none. */
export function readMemoryLimit(file: string): string | undefined {
  let text: string;
  try {
    text = readFileSync(file, 'utf8').trim();
  } catch {
    return undefined;
  }
  if (!/^\d+$/.test(text)) return undefined; // v2 `max`
  const bytes = Number(text);
  // v1 writes "no limit" as the largest page-aligned value.
  if (bytes >= 2 ** 62) return undefined;
  const mi = bytes / 2 ** 20;
  return Number.isInteger(mi) ? `${mi}Mi` : `${Math.round(mi)}Mi (${bytes} bytes)`;
}

/**
 * The runner's own memory cgroup's OOM counter, found from /proc/self/cgroup and the mounts
 * (`root` is where /proc and /sys are, for tests), or why there is none to watch: no memory
 * controller mounted (gVisor, some sandboxes), or a kernel without the counter.
 */
export function locateOomCounter(root = '/'): OomCounter | { missing: string } {
  let cgroups: { v1Memory?: string; v2?: string };
  let mounts: Mount[];
  try {
    cgroups = parseProcCgroup(readFileSync(path.join(root, 'proc/self/cgroup'), 'utf8'));
    mounts = parseMountinfo(readFileSync(path.join(root, 'proc/self/mountinfo'), 'utf8'));
  } catch (err) {
    return { missing: `cannot read the process's cgroups: ${(err as Error).message}` };
  }
  const tried: string[] = [];
  // A hybrid host has both hierarchies; the memory controller is then on v1.
  const v1 = mounts.find((m) => m.fsType === 'cgroup' && m.superOptions.includes('memory'));
  if (cgroups.v1Memory !== undefined && v1) {
    const dir = path.join(root, cgroupDir(v1, cgroups.v1Memory));
    const file = path.join(dir, 'memory.oom_control');
    if (readOomKills(file) !== undefined)
      return { version: 1, file, limitFile: path.join(dir, 'memory.limit_in_bytes') };
    tried.push(file);
  }
  const v2 = mounts.find((m) => m.fsType === 'cgroup2');
  if (cgroups.v2 !== undefined && v2) {
    const dir = path.join(root, cgroupDir(v2, cgroups.v2));
    const file = path.join(dir, 'memory.events');
    if (readOomKills(file) !== undefined) return { version: 2, file, limitFile: path.join(dir, 'memory.max') };
    tried.push(file);
  }
  return {
    missing: tried.length
      ? `no oom_kill counter in ${tried.join(' or ')}`
      : 'no memory cgroup is mounted for this process',
  };
}
