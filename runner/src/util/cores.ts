import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';

/**
 * The CPU quota of this process's cgroup in cores (cgroup v2 `cpu.max`, else v1
 * `cpu.cfs_quota_us` / `cpu.cfs_period_us`), or undefined without a limit. A container run
 * with `--cpus=1` on a 16-core host sees 16 CPUs but may use one.
 */
export function cgroupCpuLimit(read: (file: string) => string | undefined = readQuiet): number | undefined {
  const v2 = read('/sys/fs/cgroup/cpu.max')?.trim().split(/\s+/);
  if (v2 && v2[0] !== 'max') {
    const quota = Number(v2[0]);
    const period = Number(v2[1] ?? 100_000);
    if (quota > 0 && period > 0) return quota / period;
  }
  const quota = Number(read('/sys/fs/cgroup/cpu/cpu.cfs_quota_us')?.trim());
  const period = Number(read('/sys/fs/cgroup/cpu/cpu.cfs_period_us')?.trim());
  if (quota > 0 && period > 0) return quota / period;
  return undefined;
}

/** Cores this process can keep busy: the CPUs it may run on, bounded by its cgroup quota. */
export function usableCores(read?: (file: string) => string | undefined): number {
  const limit = cgroupCpuLimit(read);
  const cpus = availableParallelism();
  return Math.max(1, limit === undefined ? cpus : Math.min(cpus, Math.ceil(limit)));
}

function readQuiet(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}
