import Docker from 'dockerode';
import type { GatewayConfig } from './config';
import { resolveImage } from './sandbox/image';
import { LABELS } from './sandbox/provider';

export type CheckStatus = 'ok' | 'warn' | 'fail';

export interface Check {
  name: string;
  status: CheckStatus;
  detail: string;
  /** What to do about it, when something is wrong. */
  fix?: string;
}

const SETUP = 'run `bash scripts/setup.sh` (it installs and starts an engine where none runs and builds the images)';

/** Checks what a gateway needs before it can create runs, and says what to do when it can't. */
export async function diagnose(config: GatewayConfig, opts: { notes?: Check[] } = {}): Promise<Check[]> {
  const checks: Check[] = [...(opts.notes ?? [])];
  if (config.provider === 'process') {
    checks.push({
      name: 'provider',
      status: 'warn',
      detail: 'process: tools run as local child processes WITHOUT any isolation',
      fix: 'use the docker provider (the default) for anything but development',
    });
    return checks;
  }
  if (config.provider === 'kubernetes') {
    const { diagnoseKubernetes } = await import('./sandbox/kubernetes/doctor');
    return [...checks, ...(await diagnoseKubernetes(config))];
  }
  checks.push({ name: 'provider', status: 'ok', detail: 'docker' });

  const docker = new Docker({ socketPath: config.docker.socketPath });
  let info: {
    DefaultRuntime?: string;
    Runtimes?: Record<string, unknown>;
    ServerVersion?: string;
    CgroupVersion?: string;
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

export function formatReport(checks: Check[]): string {
  const mark: Record<CheckStatus, string> = { ok: 'ok  ', warn: 'warn', fail: 'FAIL' };
  const lines = checks.map(
    (c) => `${mark[c.status]}  ${c.name.padEnd(13)} ${c.detail}${c.fix ? `\n      ${' '.repeat(13)} → ${c.fix}` : ''}`,
  );
  const failed = checks.filter((c) => c.status === 'fail').length;
  lines.push(
    failed
      ? `\n${failed} problem(s): the gateway cannot create runs until they are fixed.`
      : '\nready: the gateway can create runs.',
  );
  return lines.join('\n');
}
