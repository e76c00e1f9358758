import { test } from 'node:test';
import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { cgroupCpuLimit, usableCores } from '../../../runner/src/util/cores';

const files = (map: Record<string, string>) => (file: string) => map[file];

test('the cgroup CPU quota bounds the cores a run uses (v2, v1, none)', () => {
  assert.equal(cgroupCpuLimit(files({ '/sys/fs/cgroup/cpu.max': '150000 100000\n' })), 1.5);
  assert.equal(cgroupCpuLimit(files({ '/sys/fs/cgroup/cpu.max': 'max 100000\n' })), undefined);
  assert.equal(
    cgroupCpuLimit(
      files({ '/sys/fs/cgroup/cpu/cpu.cfs_quota_us': '50000\n', '/sys/fs/cgroup/cpu/cpu.cfs_period_us': '100000\n' }),
    ),
    0.5,
  );
  assert.equal(cgroupCpuLimit(files({ '/sys/fs/cgroup/cpu/cpu.cfs_quota_us': '-1\n' })), undefined);
  assert.equal(cgroupCpuLimit(files({})), undefined);

  assert.equal(usableCores(files({ '/sys/fs/cgroup/cpu.max': '50000 100000' })), 1, 'half a core is still one');
  assert.equal(usableCores(files({ '/sys/fs/cgroup/cpu.max': '100000000 100000' })), availableParallelism());
  assert.equal(usableCores(files({})), availableParallelism());
  assert.ok(usableCores() >= 1, 'on this machine');
});
