import Docker from 'dockerode';
import type { Check } from '../checks';
import type { GatewayConfig } from '../config';
import { resolveImage } from './image';
import { type CheckpointSupport, checkpointSupport } from './dockerCheckpoints';
import { LABELS } from './provider';

const SETUP = 'run `bash scripts/setup.sh` (it installs and starts an engine where none runs and builds the images)';

/**
 * The docker provider's checks: an engine answers on the socket, the configured runtime is
 * registered with it, the runner image is in it, and the warm pool fits its limits.
 */
export async function diagnoseDocker(config: GatewayConfig): Promise<Check[]> {
  const checks: Check[] = [{ name: 'provider', status: 'ok', detail: 'docker' }];

  const docker = new Docker({ socketPath: config.docker.socketPath });
  let info: {
    DefaultRuntime?: string;
    Runtimes?: Record<string, unknown>;
    ServerVersion?: string;
    CgroupVersion?: string;
    LiveRestoreEnabled?: boolean;
  };
  try {
    await docker.ping();
    info = await docker.info();
  } catch (err) {
    checks.push({
      name: 'engine',
      status: 'fail',
      detail: `no Docker engine answers on ${config.docker.socketPath}: ${(err as Error).message}`,
      fix: `${SETUP}; or point docker.socketPath / DOCKER_SOCKET at a running engine`,
    });
    return checks;
  }
  checks.push({
    name: 'engine',
    status: 'ok',
    detail: `Docker ${info.ServerVersion ?? '?'} on ${config.docker.socketPath} (cgroup v${info.CgroupVersion ?? '?'})`,
  });

  checks.push(
    info.LiveRestoreEnabled
      ? { name: 'live-restore', status: 'ok', detail: 'on: runs outlive an engine restart or upgrade' }
      : {
          name: 'live-restore',
          status: 'warn',
          detail: 'off: stopping or upgrading the engine ends every live run',
          fix: 'set "live-restore": true in /etc/docker/daemon.json and send dockerd SIGHUP (scripts/setup.sh does)',
        },
  );

  const runtimes = Object.keys(info.Runtimes ?? {});
  const runtime = config.docker.runtime || info.DefaultRuntime || 'runc';
  if (config.docker.runtime && !runtimes.includes(config.docker.runtime)) {
    checks.push({
      name: 'runtime',
      status: 'fail',
      detail: `runtime ${config.docker.runtime} is not registered with the engine (it has: ${runtimes.join(', ') || 'none'})`,
      fix: `register it in /etc/docker/daemon.json ("runtimes": {"${config.docker.runtime}": {"path": ..., "runtimeArgs": [...]}}) and restart dockerd, or clear docker.runtime`,
    });
  } else {
    checks.push({
      name: 'runtime',
      status: 'ok',
      detail: `${runtime}${config.docker.runtime ? '' : ' (the engine default)'}`,
    });
  }
  // Which depths a pause can reach here: memory needs a runtime that checkpoints and an engine
  // whose checkpoint API is on.
  const memory = await checkpointSupport(docker, config.docker.runtime).catch(
    (err: Error): CheckpointSupport => ({ ok: false, why: `the engine could not be asked: ${err.message}` }),
  );
  checks.push(
    memory.ok && config.fastPath
      ? {
          name: 'pause',
          status: 'ok',
          detail: `memory depth (the whole sandbox checkpointed and restored: ${memory.why}), portable where a checkpoint fails`,
        }
      : {
          name: 'pause',
          status: 'ok',
          detail: `portable depth only: ${memory.ok ? 'fastPath is off (a memory resume reconnects through the runner socket)' : memory.why}`,
          fix: 'for memory depth: TETHER_WITH_RUNSC=1 bash scripts/setup.sh (runsc registered, the engine experimental) and docker.runtime runsc',
        },
  );
  if (config.docker.runtimeArgs.length) {
    checks.push({
      name: 'runtime args',
      status: 'warn',
      detail: `docker.runtimeArgs (${config.docker.runtimeArgs.join(' ')}) cannot be set per container`,
      fix: 'put them under the runtime in /etc/docker/daemon.json',
    });
  }

  const image = resolveImage(config);
  if (!image) {
    checks.push({
      name: 'image',
      status: 'fail',
      detail: 'no runner image configured',
      fix: `${SETUP}; or set TETHER_IMAGE / docker.image`,
    });
    return checks;
  }
  try {
    const img = await docker.getImage(image).inspect();
    const size = (img.Size / 1e9).toFixed(2);
    checks.push({ name: 'image', status: 'ok', detail: `${image} (${size} GB, user ${img.Config.User || 'root'})` });
  } catch {
    checks.push({
      name: 'image',
      status: 'fail',
      detail: `runner image ${image} does not exist in this engine`,
      fix: SETUP,
    });
  }
  checks.push(await poolCheck(config, docker));
  return checks;
}

/** The warm pool as configured, and the pooled sandboxes of this instance the engine holds now. */
async function poolCheck(config: GatewayConfig, docker: Docker): Promise<Check> {
  const { maxTotal, maxMemoryMb } = config.pool;
  const templates = Object.entries(config.pool.templates).filter(([, n]) => n > 0);
  const size = config.pool.size + templates.reduce((sum, [, n]) => sum + n, 0);
  if (size <= 0 || maxTotal <= 0)
    return { name: 'pool', status: 'ok', detail: 'off (pool.size 0): every run starts cold' };
  const filters = JSON.stringify({
    label: [`${LABELS.managed}=true`, `${LABELS.instance}=${config.instance}`, LABELS.pool],
  });
  const found = await docker.listContainers({ all: true, filters }).catch(() => undefined);
  const running = found?.filter((c) => c.State === 'running').length;
  const now = found
    ? `; ${running} pooled sandbox(es) of instance ${config.instance} running now (idle or claimed)`
    : '';
  const memoryMb = Math.min(config.limits.default.memoryMb, config.limits.max.memoryMb);
  const fits = Math.min(size, maxTotal, Math.floor(maxMemoryMb / Math.max(1, memoryMb)));
  const kinds = templates.length
    ? ` (${[`${config.pool.size} of the runner image`, ...templates.map(([t, n]) => `${n} of template ${t}`)].join(', ')})`
    : '';
  const detail = `${size} warm sandbox(es) for the default limits${kinds} (at most ${maxTotal}, within ${maxMemoryMb} MiB of memory limits)${now}`;
  if (fits < size)
    return {
      name: 'pool',
      status: 'warn',
      detail,
      fix: `pool.maxTotal or pool.maxMemoryMb keeps the pool at ${fits}; raise them or lower pool.size (and pool.templates)`,
    };
  return { name: 'pool', status: 'ok', detail };
}
