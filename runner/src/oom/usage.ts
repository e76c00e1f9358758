import { lstatSync, readFileSync, readdirSync } from 'node:fs';
import * as path from 'node:path';
import { cgroupDir, type Mount, parseMountinfo, parseProcCgroup } from './cgroup';

/** What the runner's own cgroup says its sandbox uses; the same three figures a provider reports. */
export interface CgroupUsage {
  /** Memory its processes hold, page cache that could be dropped (inactive files) excluded. */
  memoryBytes: number;
  /** CPU time of every process in the cgroup since it was made. */
  cpuMillis: number;
  /** Blocks the workspace's files hold. */
  diskBytes: number;
}

/** The files to read: where the memory and CPU figures of the runner's own cgroup are. */
export interface UsageFiles {
  version: 1 | 2;
  /** v1: memory.usage_in_bytes; v2: memory.current. */
  memory: string;
  /** memory.stat (inactive_file / total_inactive_file). */
  memoryStat: string;
  /** v1: cpuacct.usage (ns); v2: cpu.stat (usage_usec). */
  cpu: string;
}

/** Where the runner's own cgroup files are (`root` is where /proc and /sys are, for tests); undefined when not mounted. */
export function locateUsageFiles(root = '/'): UsageFiles | undefined {
  let cgroups: ReturnType<typeof parseProcCgroup>;
  let mounts: Mount[];
  try {
    cgroups = parseProcCgroup(readFileSync(path.join(root, 'proc/self/cgroup'), 'utf8'));
    mounts = parseMountinfo(readFileSync(path.join(root, 'proc/self/mountinfo'), 'utf8'));
  } catch {
    return undefined;
  }
  const v1 = (controller: string) => {
    const m = mounts.find((x) => x.fsType === 'cgroup' && x.superOptions.includes(controller));
    const at = cgroups.v1[controller];
    return m && at !== undefined ? path.join(root, cgroupDir(m, at)) : undefined;
  };
  const mem = v1('memory');
  const cpu = v1('cpuacct');
  if (mem && cpu)
    return {
      version: 1,
      memory: path.join(mem, 'memory.usage_in_bytes'),
      memoryStat: path.join(mem, 'memory.stat'),
      cpu: path.join(cpu, 'cpuacct.usage'),
    };
  const unified = mounts.find((m) => m.fsType === 'cgroup2');
  if (unified && cgroups.v2 !== undefined) {
    const dir = path.join(root, cgroupDir(unified, cgroups.v2));
    return {
      version: 2,
      memory: path.join(dir, 'memory.current'),
      memoryStat: path.join(dir, 'memory.stat'),
      cpu: path.join(dir, 'cpu.stat'),
    };
  }
  return undefined;
}

const statField = (text: string, name: string) => {
  const m = new RegExp(`^${name} (\\d+)$`, 'm').exec(text);
  return m ? Number(m[1]) : undefined;
};

/** Memory and CPU from the cgroup files. */
export function readCgroupUsage(files: UsageFiles): { memoryBytes: number; cpuMillis: number } {
  const usage = Number(readFileSync(files.memory, 'utf8').trim());
  const stat = readFileSync(files.memoryStat, 'utf8');
  // v1's hierarchical figure first (it counts child cgroups, as usage_in_bytes does).
  const inactive = statField(stat, 'total_inactive_file') ?? statField(stat, 'inactive_file') ?? 0;
  const cpuText = readFileSync(files.cpu, 'utf8');
  const cpuMillis =
    files.version === 1
      ? Math.round(Number(cpuText.trim()) / 1e6)
      : Math.round((statField(cpuText, 'usage_usec') ?? 0) / 1000);
  return { memoryBytes: Math.max(0, usage - inactive), cpuMillis };
}

/**
 * Blocks held by the files under `dir` (hard links once), without following links or leaving
 * the filesystem; at most `maxEntries` entries are looked at, so that a huge tree costs a
 * bounded walk (its figure is then a lower bound).
 */
export function diskBytes(dir: string, maxEntries = 200_000): number {
  let total = 0;
  let seen = 0;
  const inodes = new Set<string>();
  let dev: number | undefined;
  const stack = [dir];
  while (stack.length && seen < maxEntries) {
    const at = stack.pop()!;
    let st: ReturnType<typeof lstatSync>;
    try {
      st = lstatSync(at);
    } catch {
      continue;
    }
    seen++;
    dev ??= st.dev;
    if (st.dev !== dev) continue;
    const key = `${st.ino}`;
    if (st.nlink > 1) {
      if (inodes.has(key)) continue;
      inodes.add(key);
    }
    total += st.blocks * 512;
    if (!st.isDirectory()) continue;
    try {
      for (const name of readdirSync(at)) stack.push(path.join(at, name));
    } catch {
      // Unreadable: counted as its own blocks only.
    }
  }
  return total;
}

/**
 * The run's usage as the runner reads it itself: its cgroup for memory and CPU (no permission
 * beyond its own files, no request to any API server), a walk of the workspace for disk. The
 * walk is kept for `diskEveryMs`, so that frequent reads (a metrics scrape) cost little.
 */
export class UsageReader {
  private files?: UsageFiles | null;
  private disk?: { at: number; bytes: number };

  constructor(
    private readonly workspace: () => string | undefined,
    private readonly diskEveryMs = 5000,
    private readonly root = '/',
  ) {}

  read(): CgroupUsage {
    if (this.files === undefined) this.files = locateUsageFiles(this.root) ?? null;
    if (!this.files) throw new Error('no memory and cpu cgroup is mounted for the runner');
    const { memoryBytes, cpuMillis } = readCgroupUsage(this.files);
    const now = Date.now();
    if (!this.disk || now - this.disk.at > this.diskEveryMs) {
      const ws = this.workspace();
      this.disk = { at: now, bytes: ws ? diskBytes(ws) : 0 };
    }
    return { memoryBytes, cpuMillis, diskBytes: this.disk.bytes };
  }
}
