import Docker from 'dockerode';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import * as path from 'node:path';
import { PassThrough } from 'node:stream';
import { defaultConfig } from '../../../gateway/src/config';
import { readImagesEnv } from '../../../gateway/src/sandbox/image';
import { LABELS } from '../../../gateway/src/sandbox/provider';

export const docker = new Docker({ socketPath: process.env.DOCKER_SOCKET ?? '/var/run/docker.sock' });

/** The runner image the suite runs against: TETHER_IMAGE, else what scripts/setup.sh built. */
export function runnerImage(): string {
  const image = process.env.TETHER_IMAGE || readImagesEnv().TETHER_IMAGE;
  if (!image) throw new Error('no runner image: run scripts/setup.sh (or set TETHER_IMAGE)');
  return image;
}

export function gatewayImage(): string {
  const image = process.env.TETHER_GATEWAY_IMAGE || readImagesEnv().TETHER_GATEWAY_IMAGE;
  if (!image) throw new Error('no gateway image: run scripts/setup.sh (or set TETHER_GATEWAY_IMAGE)');
  return image;
}

/** The gateway config's docker section pointed at the suite's runner image. */
export function dockerConfig() {
  return { ...defaultConfig().docker, image: runnerImage() };
}

/** The containers of one run (normally exactly one). */
export async function containersOf(runId: string, all = true): Promise<Docker.ContainerInfo[]> {
  return docker.listContainers({ all, filters: JSON.stringify({ label: [`${LABELS.runId}=${runId}`] }) });
}

export async function containerOf(runId: string): Promise<Docker.Container> {
  const [info] = await containersOf(runId);
  if (!info) throw new Error(`no container for ${runId}`);
  return docker.getContainer(info.Id);
}

export interface ExecResult {
  exitCode: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a command inside a run's container, as the run's user: the test's probe from within. */
export async function execIn(
  container: Docker.Container,
  cmd: string[],
  opts: { timeoutMs?: number } = {},
): Promise<ExecResult> {
  const exec = await container.exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true });
  const stream = await exec.start({ hijack: true, stdin: false });
  const out = new PassThrough();
  const err = new PassThrough();
  const chunks = { out: [] as Buffer[], err: [] as Buffer[] };
  out.on('data', (d: Buffer) => chunks.out.push(d));
  err.on('data', (d: Buffer) => chunks.err.push(d));
  docker.modem.demuxStream(stream, out, err);
  await new Promise<void>((resolve) => {
    const timer = opts.timeoutMs ? setTimeout(() => (stream.destroy(), resolve()), opts.timeoutMs) : undefined;
    stream.on('end', () => (clearTimeout(timer), resolve()));
    stream.on('close', () => (clearTimeout(timer), resolve()));
    stream.on('error', () => (clearTimeout(timer), resolve()));
  });
  const info = await exec.inspect().catch(() => undefined);
  return {
    exitCode: info?.ExitCode ?? null,
    stdout: Buffer.concat(chunks.out).toString(),
    stderr: Buffer.concat(chunks.err).toString(),
  };
}

/** Runs a one-off container of `image` with a bash script and returns its output. */
export async function runScript(image: string, script: string): Promise<ExecResult> {
  const out = new PassThrough();
  const err = new PassThrough();
  const chunks = { out: [] as Buffer[], err: [] as Buffer[] };
  out.on('data', (d: Buffer) => chunks.out.push(d));
  err.on('data', (d: Buffer) => chunks.err.push(d));
  const [res, container] = (await docker.run(image, ['-c', script], [out, err], {
    Entrypoint: ['bash'],
    Tty: false,
    Labels: { 'dev.tether.test': 'true' },
    HostConfig: { NetworkMode: 'none', AutoRemove: false },
  })) as [{ StatusCode: number }, Docker.Container];
  await container.remove({ force: true }).catch(() => undefined);
  return {
    exitCode: res.StatusCode,
    stdout: Buffer.concat(chunks.out).toString(),
    stderr: Buffer.concat(chunks.err).toString(),
  };
}

export async function until<T>(
  what: string,
  fn: () => Promise<T | undefined | false>,
  timeoutMs = 15000,
  everyMs = 100,
): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Removes whatever a test's gateway instance left behind (after a failure, say). */
export async function removeInstance(instance: string, { quiet = false } = {}): Promise<string[]> {
  const filters = JSON.stringify({ label: [`${LABELS.instance}=${instance}`] });
  for (const c of await docker.listContainers({ all: true, filters }))
    await docker
      .getContainer(c.Id)
      .remove({ force: true })
      .catch(() => undefined);
  // A volume whose container is being removed is still in use for a moment: tried again, and a
  // volume left after that is said, not kept quietly on the machine.
  for (let attempt = 0; ; attempt++) {
    const { Volumes } = await docker.listVolumes({ filters });
    const failed: string[] = [];
    for (const v of Volumes ?? [])
      await docker
        .getVolume(v.Name)
        .remove()
        .catch((err: Error) => failed.push(`${v.Name}: ${err.message}`));
    if (failed.length === 0) return [];
    if (attempt === 10) {
      if (!quiet) console.error(`volumes of ${instance} left behind:\n${failed.join('\n')}`);
      return failed;
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}

/**
 * `tether serve` in a child process of its own (a gateway that can be killed outright), with
 * `env` over this process's; `ready` settles once it listens, or fails with its stderr.
 */
export function serveGateway(env: Record<string, string>): { child: ChildProcess; ready: Promise<void> } {
  const child = spawn(process.execPath, [path.resolve(__dirname, '../../../../bin/tether'), 'serve'], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const ready = new Promise<void>((resolve, reject) => {
    let err = '';
    child.stderr!.on('data', (d: Buffer) => ((err += d.toString()), /listening on/.test(err) && resolve()));
    child.once('exit', (code) => reject(new Error(`gateway exited with ${code}: ${err}`)));
  });
  return { child, ready };
}

const engineUp = () =>
  docker.ping().then(
    () => true,
    () => false,
  );

/** Only root may stop and start this machine's engine, as an engine upgrade does. */
export const canRestartEngine = () => process.getuid?.() === 0;

/** Stops the engine (SIGTERM, as a service manager does) and waits until it is gone. */
export async function stopEngine(): Promise<void> {
  const pid = Number(execFileSync('pgrep', ['-xo', 'dockerd']).toString().trim());
  process.kill(pid, 'SIGTERM');
  await until('the engine to stop', async () => !(await engineUp()) && !isAlive(pid), 60_000, 200);
}

/** Starts the engine the way the set-up does, and waits until it answers. */
export async function startEngine(): Promise<void> {
  execFileSync('bash', [path.resolve(__dirname, '../../../../scripts/setup.sh'), '--engine-only'], { stdio: 'ignore' });
  await until('the engine to answer', engineUp, 60_000, 200);
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
