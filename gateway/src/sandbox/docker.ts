import Docker from 'dockerode';
import { createReadStream, existsSync, promises as fs } from 'node:fs';
import * as path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { PassThrough, Writable, type Readable, type Duplex } from 'node:stream';
import type { GatewayConfig } from '../config';
import { logger } from '../log';
import { bootRunner, runSecret, socketDir } from './boot';
import { resolveImage } from './image';
import { EGRESS_MOUNT, egressEnvironment } from '../egress/service';
import { engineUnreachable, untilEngineAnswers } from './engineReach';
import { LoopDisks } from './loopDisk';
import {
  LABELS,
  type MemoryCheckpoints,
  type PauseDepth,
  type ProviderCapabilities,
  type Sandbox,
  type SandboxExit,
  type SandboxInfo,
  type SandboxProvider,
  type SandboxSpec,
  type SandboxUsage,
  SandboxUnreachableError,
  SandboxBackendUnavailableError,
} from './provider';
import { stripTarPrefix, withConfinedArchive } from './tarFilter';
import { DockerTemplateImages } from './dockerTemplateImages';
import { type CheckpointSupport, checkpointSupport, DockerCheckpoints } from './dockerCheckpoints';
import { runHelper } from './dockerHelper';
import { COPY_EACH } from './workspaceCopy';

/** Where the runner image keeps the workspace and the run user's home. */
export const WORKSPACE = '/workspace';
const HOME = '/home/tether';
const VOLUME_PREFIX = 'tether-ws-';
/** On a size-limited workspace volume: the filesystem image behind its loop device. */
const DISK_IMAGE_LABEL = 'dev.tether.disk-image';
/**
 * On a memory fork's container: the run whose secret its runner holds (the runner was copied,
 * with everything in its memory, from that run's sandbox).
 */
const SECRET_OF_LABEL = 'dev.tether.secret-of';
/** /dev/shm: memory-backed like /tmp, and small (Docker's own default). */
const SHM_BYTES = 64 * 1024 * 1024;
/** Where the run's socket directory is mounted inside the container. */
const SOCKET_DIR = '/run/tether';
const SOCKET_NAME = 'runner.sock';
/** The runner image's init and the runner's entry point (images/runner/entry/). */
const INIT = '/usr/local/bin/tether-init';
const RUNNER_ENTRY = '/usr/local/bin/tether-runner';
/** What every container the provider starts is denied: network, capabilities, a writable root. */
const LOCKED_DOWN = {
  NetworkMode: 'none',
  CapDrop: ['ALL'],
  SecurityOpt: ['no-new-privileges'],
  ReadonlyRootfs: true,
} as const;

interface Live {
  runId: string;
  /** The engine's attach to the runner's stdio, when one was made. */
  stream?: Duplex;
  /** Set when the engine reported an OOM event in this container's cgroup. */
  oom: boolean;
  abort: AbortController;
  /** The engine wait under way: ended when the engine goes away (its wait would hang). */
  waiting?: AbortController;
}

const status = (err: unknown) => (err as { statusCode?: number } | undefined)?.statusCode;
/** An engine that went away is said plainly: what needs it now can be tried again. */
const backendError = (err: unknown): never => {
  if (!engineUnreachable(err)) throw err;
  throw new SandboxBackendUnavailableError(
    `the Docker engine is unreachable (${(err as Error).message}); live runs go on without it: try again when it is back`,
  );
};
const ignoreMissing = (err: unknown) => {
  if (status(err) !== 404 && status(err) !== 304) throw err;
};

/**
 * One hardened container per run, driven through dockerode. The runner is the container's
 * main process; the gateway talks JSON-RPC over the container's attached stdio, so the run
 * needs no network at all. The workspace is a per-run volume (or a bind-mounted host
 * directory) at /workspace.
 */
/** The run's own workspace volume (none for a host workspace). */
function workspaceVolumeOf(info: Docker.ContainerInspectInfo): string | undefined {
  return info.Mounts?.find(
    (m) => m.Type === 'volume' && m.Destination === WORKSPACE && m.Name?.startsWith(VOLUME_PREFIX),
  )?.Name;
}

export class DockerProvider implements SandboxProvider {
  readonly name = 'docker';
  readonly docker: Docker;
  readonly capabilities: ProviderCapabilities;
  private readonly live = new Map<string, Live>();
  /**
   * Containers the engine restarted under (live-restored): its checkpoint API refuses them
   * ("invalid task checkpoint option"), so they are not quiesced for a checkpoint that cannot be.
   */
  private readonly outlivedEngine = new Set<string>();
  private events?: Readable;
  private watching?: Promise<void>;
  private closed = false;
  private readonly lifetime = new AbortController();
  /** Workspace filesystem images of this instance, by container id once known. */
  private readonly disks: LoopDisks;
  private readonly diskImages = new Map<string, string>();
  /** What the engine said about memory checkpoints; `memory` is a pause depth once it said yes. */
  private support: CheckpointSupport = { ok: false, why: 'not asked yet' };
  readonly memory: MemoryCheckpoints;

  constructor(private readonly config: GatewayConfig) {
    this.docker = new Docker({ socketPath: config.docker.socketPath });
    const provider = this;
    this.capabilities = {
      sharedState: false,
      keepsRunsOnShutdown: config.docker.keepOnShutdown,
      egress: { carried: true },
      templateImages: new DockerTemplateImages(config, this.docker),
      get pauseDepths(): readonly PauseDepth[] {
        return provider.support.ok && config.fastPath ? ['portable', 'memory'] : ['portable'];
      },
      pool: 'local',
    };
    this.disks = new LoopDisks(path.join(config.stateDir, 'disks', config.instance), config.docker.spareDisks);
    this.memory = new DockerCheckpoints({
      docker: this.docker,
      socketOf: (runId) => path.join(socketDir(config.stateDir, runId), SOCKET_NAME),
      attach: (id) => this.attach(id),
      release: (id) => this.release(id),
      refusal: (id) =>
        this.outlivedEngine.has(id)
          ? 'the engine restarted under its container, and its checkpoint API refuses such containers'
          : undefined,
      timeoutMs: config.runs.startTimeoutSeconds * 1000,
      createCopy: (spec, source) => this.createCopy(spec, source),
      discard: (id) => this.park(id).then(() => undefined),
      helperImage: () => resolveImage(config),
    });
    void this.checkpointSupport().catch(() => undefined);
  }

  /**
   * Asks the engine whether it takes memory checkpoints of this runtime's containers (at start,
   * and again for `tether doctor`); an engine that cannot be asked is taken as no.
   */
  async checkpointSupport(): Promise<CheckpointSupport> {
    try {
      this.support = await checkpointSupport(this.docker, this.config.docker.runtime);
    } catch (err) {
      this.support = { ok: false, why: `the engine could not be asked: ${(err as Error).message}` };
    }
    return this.support;
  }

  private get user(): { uid: number; gid: number; spec: string } {
    const [u, g] = this.config.docker.user.split(':');
    const uid = Number(u);
    const gid = Number(g ?? u);
    return {
      uid: Number.isInteger(uid) ? uid : 1000,
      gid: Number.isInteger(gid) ? gid : 1000,
      spec: this.config.docker.user,
    };
  }

  create(spec: SandboxSpec): Promise<Sandbox> {
    return this.createSandbox(spec).catch(backendError);
  }

  private async createSandbox(spec: SandboxSpec): Promise<Sandbox> {
    const image = spec.image || resolveImage(this.config);
    if (!image) throw new Error('no runner image configured: run scripts/setup.sh, or set TETHER_IMAGE / docker.image');
    await this.watchOom();
    const kept = spec.keptWorkspace;
    if (kept) await this.checkKept(kept);
    const volume = spec.hostWorkspace ? undefined : (kept ?? `${VOLUME_PREFIX}${spec.runId}`);
    const image_ = volume && !kept ? await this.createVolume(volume, spec) : undefined;
    let sockets = this.config.fastPath ? await this.socketDirFor(spec.runId) : undefined;
    let noSocket: string | undefined;
    let container: Docker.Container | undefined;
    try {
      const createIt = () =>
        this.docker.createContainer(this.containerOptions(spec, image, volume, sockets)).catch((err) => {
          if (status(err) === 404)
            throw new Error(`runner image ${image} not found: run scripts/setup.sh (or \`tether doctor\`)`);
          throw err;
        });
      container = await createIt().catch(async (err: Error) => {
        // A gateway in a container whose state directory is not the host's: the engine finds
        // no such directory to mount. The run goes on over stdio.
        if (!sockets || !/bind source path does not exist/.test(err.message)) throw err;
        noSocket = `the engine cannot mount ${sockets} (mount the state directory at the same path on the host and in the gateway's container)`;
        await fs.rm(sockets, { recursive: true, force: true }).catch(() => undefined);
        sockets = undefined;
        return createIt();
      });
      // Attach before start: nothing the runner writes can be missed.
      let started!: () => void;
      const attached = await this.attachStdio(container.id, spec.runId);
      const secret = await runSecret(this.config.stateDir, spec.runId);
      const sandbox = this.sandbox(
        container.id,
        spec.runId,
        secret,
        new Promise<void>((r) => (started = r)),
        volume,
        attached,
      );
      await container.start();
      started();
      if (image_) this.diskImages.set(container.id, image_);
      // The boot line is the only time the secret is sent: on the runner's own stdin.
      const hello = await bootRunner(
        attached.stdin,
        attached.stdout,
        sandbox.secret,
        sockets ? { unix: `${SOCKET_DIR}/${SOCKET_NAME}` } : {},
        this.config.runs.startTimeoutSeconds * 1000,
      );
      if (!sockets) return { ...sandbox, noSocketReason: noSocket ?? 'fastPath is off' };
      if (!hello.listening.unix)
        return { ...sandbox, noSocketReason: hello.errors.join('; ') || 'the runner did not listen' };
      // Under a runtime that keeps sockets inside the sandbox (gVisor without --host-uds) the
      // host sees no socket file: stdio then.
      const hostSocket = path.join(sockets, SOCKET_NAME);
      if (!existsSync(hostSocket))
        return {
          ...sandbox,
          noSocketReason: `the runner listens but ${hostSocket} does not appear on this side (a runtime without host socket support?)`,
        };
      return { ...sandbox, socket: { path: hostSocket } };
    } catch (err) {
      // A kept workspace outlives a failed resume: the paused run still has it.
      if (container) await (kept ? this.park(container.id) : this.remove(container.id)).catch(() => undefined);
      else if (volume && !kept)
        await this.docker
          .getVolume(volume)
          .remove()
          .catch(() => undefined);
      if (image_) await this.disks.release({ image: image_ }).catch(() => undefined);
      if (sockets) await fs.rm(sockets, { recursive: true, force: true }).catch(() => undefined);
      throw err;
    }
  }

  /**
   * The run's workspace volume; with a disk limit, a volume over its own loop-mounted ext4
   * image (overlay2 on ext4 has no per-container size limit). Returns the image, if any.
   */
  private async createVolume(volume: string, spec: SandboxSpec): Promise<string | undefined> {
    const keep = [LABELS.managed, LABELS.instance, LABELS.runId, LABELS.tenant] as string[];
    const labels = Object.fromEntries(Object.entries(spec.labels).filter(([k]) => keep.includes(k)));
    if (this.config.docker.disk === 'none' || !spec.limits.diskMb) {
      await this.docker.createVolume({ Name: volume, Labels: labels });
      return undefined;
    }
    const disk = await this.disks.create(spec.runId, spec.limits.diskMb, this.user);
    try {
      // `discard`: files a run deletes give their space back to the host.
      await this.docker.createVolume({
        Name: volume,
        Driver: 'local',
        DriverOpts: { type: 'ext4', device: disk.device, o: 'discard' },
        Labels: { ...labels, [DISK_IMAGE_LABEL]: disk.image },
      });
    } catch (err) {
      await this.disks.release(disk);
      throw err;
    }
    return disk.image;
  }

  /**
   * The run's socket directory on this side, bind-mounted into the container. The runner's user
   * must create its socket there; the handshake, not the mode, keeps other processes out. A
   * gateway in a container needs the state directory at the same path as on the host.
   */
  private async socketDirFor(runId: string): Promise<string> {
    const dir = socketDir(this.config.stateDir, runId);
    await fs.mkdir(path.dirname(dir), { recursive: true, mode: 0o711 });
    await fs.mkdir(dir, { recursive: true, mode: 0o700 });
    const { uid, gid } = this.user;
    if (process.getuid?.() === 0) await fs.chown(dir, uid, gid);
    else await fs.chmod(dir, 0o777);
    return dir;
  }

  private containerOptions(
    spec: SandboxSpec,
    image: string,
    volume: string | undefined,
    sockets?: string,
  ): Docker.ContainerCreateOptions {
    const { limits } = spec;
    const memory = limits.memoryMb * 1024 * 1024;
    const { uid, gid } = this.user;
    // tmpfs pages are charged to the run's memory; a quarter each keeps a full /tmp or home an
    // ENOSPC for the writer rather than an OOM kill of the whole run.
    const tmpfsMb = Math.max(16, Math.floor(limits.memoryMb / 4));
    const tmpfs = (mode: string) => `rw,nosuid,nodev,size=${tmpfsMb}m,mode=${mode},uid=${uid},gid=${gid}`;
    return {
      name: `tether-${spec.runId}`,
      Image: image,
      // PID 1 is the image's tini from an execute-only copy rather than Docker's own init, which
      // any process of the run's uid could read (/proc/1/fd/0 and fd/1 are the runner's stdio).
      Entrypoint: [INIT, RUNNER_ENTRY],
      Labels: spec.labels,
      User: this.user.spec,
      WorkingDir: WORKSPACE,
      Env: [
        `TETHER_RUN_ID=${spec.runId}`,
        `TETHER_WORKSPACE=${WORKSPACE}`,
        `HOME=${HOME}`,
        ...(spec.egress ? egressEnvironment(spec.egress) : []),
      ],
      OpenStdin: true,
      StdinOnce: false,
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
      NetworkDisabled: true,
      HostConfig: {
        ...LOCKED_DOWN,
        Tmpfs: { '/tmp': tmpfs('1777'), [HOME]: tmpfs('700') },
        ShmSize: SHM_BYTES,
        Init: false,
        PidsLimit: limits.pids,
        Memory: memory,
        MemorySwap: memory,
        NanoCpus: limits.cpuMillis * 1_000_000,
        // Every protocol byte would otherwise be written to a log file on disk.
        LogConfig: { Type: 'none', Config: {} },
        Runtime: this.config.docker.runtime || undefined,
        Mounts: [
          volume
            ? { Type: 'volume', Source: volume, Target: WORKSPACE }
            : { Type: 'bind', Source: spec.hostWorkspace!, Target: WORKSPACE },
          // Egress is a Unix socket to the gateway's proxy; the network stays `none`.
          ...(spec.egress
            ? [{ Type: 'bind' as const, Source: spec.egress.socketDir, Target: EGRESS_MOUNT, ReadOnly: true }]
            : []),
          ...(sockets ? [{ Type: 'bind' as const, Source: sockets, Target: SOCKET_DIR }] : []),
        ],
      },
    };
  }

  /** Attaches to the container's stdio through the engine. */
  private async attachStdio(
    id: string,
    runId: string,
  ): Promise<{ stream: Duplex; stdin: Writable; stdout: PassThrough }> {
    const container = this.docker.getContainer(id);
    const stream = (await container.attach({
      stream: true,
      stdin: true,
      stdout: true,
      stderr: true,
      hijack: true,
    })) as unknown as Duplex;
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    // The writer the RPC layer holds outlives the socket: writes after the end are dropped
    // instead of throwing, since the exit is reported through `exited` anyway.
    const stdin = new Writable({
      write: (chunk, _enc, cb) => (stream.writable && !stream.destroyed ? stream.write(chunk, () => cb()) : cb()),
    });
    this.docker.modem.demuxStream(stream, stdout, stderr);
    stream.on('end', () => stdout.end());
    stream.on('close', () => stdout.end());
    stream.on('error', (err) => stdout.destroy(err));
    stderr.on('data', (d: Buffer) => logger.debug({ runId, runner: d.toString().trimEnd() }));
    const entry = this.live.get(id);
    if (entry) entry.stream = stream;
    return { stream, stdin, stdout };
  }

  /** The sandbox for a container; once it has started, watches for its end. */
  private sandbox(
    id: string,
    runId: string,
    secret: Buffer,
    started: Promise<void>,
    workspace: string | undefined,
    attached?: { stream: Duplex; stdin: Writable; stdout: PassThrough },
  ): Sandbox {
    const container = this.docker.getContainer(id);
    const abort = new AbortController();
    const entry: Live = { runId, stream: attached?.stream, oom: false, abort };
    this.live.set(id, entry);
    const exited = started.then(() => this.waitExit(container, entry));
    let stdio = attached ? Promise.resolve(attached) : undefined;
    const sandbox = {
      id,
      runId,
      workspacePath: WORKSPACE,
      ...(workspace ? { keepable: workspace } : {}),
      secret,
      // Only where the socket cannot be used does the engine carry the runner's stdio.
      stdio: () => (stdio ??= this.attachStdio(id, runId)),
      exited,
      putArchive: (rel: string, tar: Readable) => this.putArchive(container, rel, tar).catch(backendError),
      getArchive: (rel: string) => this.getArchive(container, rel).catch(backendError),
      usage: () => this.usage(container.id),
    };
    return sandbox;
  }

  /**
   * Whatever ended the engine's wait, the container's own state decides: an engine that stops
   * or restarts ends every wait too (the events stream tells: a wait cut off that way never
   * settles), and with live-restore the container is still running.
   */
  private async waitExit(container: Docker.Container, entry: Live): Promise<SandboxExit> {
    const { signal } = entry.abort;
    const never = new Promise<SandboxExit>(() => undefined); // the gateway let go of it
    const removed = () => ({ reason: 'the container was removed', oomKilled: entry.oom, exitCode: null });
    const lostTrack = (e: Error) => ({
      reason: `lost track of the container: ${e.message}`,
      oomKilled: entry.oom,
      exitCode: null,
    });
    try {
      for (;;) {
        const attempt = new AbortController();
        entry.waiting = attempt;
        const either = AbortSignal.any([signal, attempt.signal]);
        // Raced, not only aborted: a wait whose connection the engine dropped settles never.
        const cut = new Promise<Error>((resolve) =>
          either.addEventListener('abort', () => resolve(new Error('the wait was cut off')), { once: true }),
        );
        const err = await Promise.race([
          container.wait({ condition: 'not-running', abortSignal: either }).then(
            () => undefined,
            (e: unknown) => e,
          ),
          cut,
        ]);
        if (signal.aborted) return never;
        const cutOff = attempt.signal.aborted;
        if (!cutOff && status(err) === 404) return removed();
        if (err && !cutOff && !engineUnreachable(err)) return lostTrack(err as Error);
        const info = await this.inspectWhenReachable(container, entry).catch((e: Error) => e);
        if (signal.aborted) return never;
        if (info instanceof Error) return lostTrack(info);
        if (info === undefined) return removed();
        if (!info.State?.Running) return this.exitOf(info, entry);
        this.outlivedEngine.add(container.id);
        await sleep(100); // a wait ended by a restarting engine: wait again on the one that is back
      }
    } finally {
      entry.stream?.destroy();
    }
  }

  private async inspectWhenReachable(
    container: Docker.Container,
    entry: Live,
  ): Promise<Docker.ContainerInspectInfo | undefined> {
    for (let told = false; ; ) {
      try {
        return await container.inspect();
      } catch (err) {
        if (status(err) === 404) return undefined;
        if (!engineUnreachable(err)) throw err;
        if (!told) logger.warn({ runId: entry.runId }, 'the Docker engine is unreachable; the run goes on without it');
        told = true;
        if (!(await untilEngineAnswers(this.docker, entry.abort.signal))) return undefined;
      }
    }
  }

  private exitOf(info: Docker.ContainerInspectInfo, entry: Live): SandboxExit {
    const exitCode = info.State?.ExitCode ?? null;
    const oomKilled = entry.oom || !!info.State?.OOMKilled;
    const why = info.State?.Error ? `: ${info.State.Error}` : '';
    const reason = oomKilled
      ? `the run reached its memory limit and was killed (OOM, exit code ${exitCode})`
      : exitCode === 137
        ? 'the container was killed (exit code 137)'
        : `the container exited with code ${exitCode}${why}`;
    return { reason, oomKilled, exitCode };
  }

  /**
   * An OOM kill inside a run may hit any process in it (a language server, a kernel). The run
   * is then in an unknown state, so it ends as a whole and is reported FAILED with the reason.
   */
  private watchOom(): Promise<void> {
    if (this.closed) return Promise.resolve();
    // Concurrent creates share one subscription.
    this.watching ??= this.subscribeOom().catch((err) => {
      this.watching = undefined;
      throw err;
    });
    return this.watching;
  }

  /** An engine that restarted under live runs: their OOM events are watched again once it answers. */
  private async rewatchOom(): Promise<void> {
    while (!this.closed && this.live.size > 0 && !this.events) {
      if (!(await untilEngineAnswers(this.docker, this.lifetime.signal))) return;
      await this.watchOom().catch(() => sleep(1000));
    }
  }

  private async subscribeOom(): Promise<void> {
    const events = (await this.docker.getEvents({
      filters: JSON.stringify({ type: ['container'], event: ['oom'], label: [`${LABELS.managed}=true`] }),
    })) as unknown as Readable;
    if (this.closed) {
      events.destroy();
      return;
    }
    this.events = events;
    let buf = '';
    events.on('data', (chunk: Buffer) => {
      buf += chunk.toString('utf8');
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (!line) continue;
        try {
          const ev = JSON.parse(line) as { id?: string; Actor?: { ID?: string } };
          const id = ev.id ?? ev.Actor?.ID;
          const entry = id ? this.live.get(id) : undefined;
          if (!id || !entry) continue;
          entry.oom = true;
          logger.warn({ runId: entry.runId }, 'run hit its memory limit; ending it');
          void this.docker
            .getContainer(id)
            .kill()
            .catch(() => undefined);
        } catch {
          // a partial or foreign line: skip it
        }
      }
    });
    const reset = () => {
      if (this.events !== events) return;
      this.events = undefined;
      this.watching = undefined;
      if (this.closed) return;
      // The engine went away, or restarted: each container's state is read again once it answers.
      for (const entry of this.live.values()) entry.waiting?.abort();
      void this.rewatchOom();
    };
    events.on('error', reset);
    events.on('close', reset);
    events.on('end', reset);
  }

  /**
   * All or nothing: the confined archive is spooled to a temp file first, and only an upload
   * that passed every check reaches the container.
   */
  private async putArchive(container: Docker.Container, rel: string, tar: Readable): Promise<void> {
    const { uid, gid } = this.user;
    await withConfinedArchive(tar, { prefix: rel, uid, gid }, (spooled) =>
      container.putArchive(createReadStream(spooled), { path: WORKSPACE, noOverwriteDirNonDir: 'true' }),
    );
  }

  private async getArchive(container: Docker.Container, rel: string): Promise<Readable> {
    // The engine names entries after the last path component; for the root that is
    // "workspace/", which the caller must not see.
    const stream = (await container.getArchive({
      path: rel ? `${WORKSPACE}/${rel}` : WORKSPACE,
    })) as unknown as Readable;
    return rel ? stream : stripTarPrefix(stream, WORKSPACE.slice(1));
  }

  async attach(id: string): Promise<Sandbox> {
    await this.watchOom();
    const info = await this.docker.getContainer(id).inspect();
    if (!info.State.Running) throw new Error(`container ${id} is not running`);
    const runId = info.Config.Labels?.[LABELS.runId] ?? '';
    const sandbox = this.sandbox(
      id,
      runId,
      await runSecret(this.config.stateDir, info.Config.Labels?.[SECRET_OF_LABEL] ?? runId),
      Promise.resolve(),
      workspaceVolumeOf(info),
    );
    // A restarted gateway reaches the runner through its socket again, without the engine. The
    // gateway before it used that socket, so the runner has retired its stdio: no fall back.
    const hostSocket = path.join(socketDir(this.config.stateDir, runId), SOCKET_NAME);
    if (this.config.fastPath && existsSync(hostSocket))
      return { ...sandbox, socket: { path: hostSocket }, socketOnly: true };
    // Started by a gateway with another state directory: its socket is there, and only that
    // directory's transport key proves a gateway to the runner. Said at once, not after a timeout.
    const mounted = info.Mounts?.find((m) => m.Destination === SOCKET_DIR)?.Source;
    if (mounted && path.resolve(mounted) !== path.dirname(hostSocket) && existsSync(path.join(mounted, SOCKET_NAME)))
      throw new SandboxUnreachableError(
        `the run was started with state directory ${path.dirname(path.dirname(mounted))}, not ${this.config.stateDir}: only a gateway with that directory can reach its runner`,
      );
    return { ...sandbox, noSocketReason: this.config.fastPath ? `no socket at ${hostSocket}` : 'fastPath is off' };
  }

  /** A memory fork's container, stopped, on its kept workspace: `source`'s command, mounts and limits. */
  private async createCopy(spec: SandboxSpec, source: string): Promise<string> {
    if (!spec.keptWorkspace) throw new Error(`the copy for run ${spec.runId} has no workspace`);
    if (!this.config.fastPath) throw new Error('a memory copy is reached through its socket (fastPath is off)');
    const info = await this.docker.getContainer(source).inspect();
    const labels = info.Config.Labels ?? {};
    const options = this.containerOptions(
      spec,
      info.Config.Image,
      spec.keptWorkspace,
      await this.socketDirFor(spec.runId),
    );
    options.Labels = { ...options.Labels, [SECRET_OF_LABEL]: labels[SECRET_OF_LABEL] ?? labels[LABELS.runId] ?? '' };
    const container = await this.docker.createContainer(options);
    return container.id;
  }

  async stop(id: string): Promise<void> {
    await this.docker.getContainer(id).stop({ t: 2 }).catch(ignoreMissing);
  }

  async remove(id: string): Promise<void> {
    const volume = await this.removeContainer(id);
    if (volume) await this.removeVolume(volume);
  }

  async park(id: string): Promise<string> {
    const volume = await this.removeContainer(id);
    if (!volume) throw new Error(`sandbox ${id} has no workspace of its own to keep`);
    return volume;
  }

  async dropWorkspace(handle: string): Promise<void> {
    if (!handle.startsWith(VOLUME_PREFIX)) throw new Error(`not a workspace volume: ${handle}`);
    await this.removeVolume(handle);
  }

  async newWorkspaces(specs: SandboxSpec[]): Promise<string[]> {
    const volumes: string[] = [];
    try {
      for (const spec of specs) {
        const volume = `${VOLUME_PREFIX}${spec.runId}`;
        await this.createVolume(volume, spec);
        volumes.push(volume);
      }
    } catch (err) {
      // Each disk image goes with its volume (the volume's label names it).
      for (const volume of volumes) await this.removeVolume(volume).catch(() => undefined);
      throw err;
    }
    return volumes;
  }

  /**
   * Copies by a short-lived container of the run's image as the run's user, with no network, no
   * capabilities and the runs' runtime (the engine's own copy would run as root on the host):
   * one copier for every copy, since under gVisor a container's start costs more than a small copy.
   */
  async copyWorkspace(from: string, into: string[], image?: string): Promise<void> {
    await this.checkKept(from);
    if (into.length === 0) return;
    const copierImage = image || resolveImage(this.config);
    if (!copierImage) throw new Error('no runner image configured');
    await runHelper(this.docker, 'copying the workspace', {
      name: `tether-copy-${into[0].slice(VOLUME_PREFIX.length)}`,
      Image: copierImage,
      Entrypoint: ['sh', '-c', COPY_EACH, 'copy'],
      Cmd: into.map((_, i) => `/to/${i}`),
      User: this.user.spec,
      Labels: { [LABELS.managed]: 'true', [LABELS.instance]: this.config.instance },
      NetworkDisabled: true,
      HostConfig: {
        ...LOCKED_DOWN,
        // Room for gVisor's own threads where it is the runtime (its gofer serves every mount,
        // and under ptrace each process of the copier is a host process too).
        PidsLimit: 512,
        Memory: 256 * 1024 * 1024,
        Runtime: this.config.docker.runtime || undefined,
        Mounts: [
          { Type: 'volume', Source: from, Target: '/from', ReadOnly: true },
          ...into.map((volume, i) => ({ Type: 'volume' as const, Source: volume, Target: `/to/${i}` })),
        ],
      },
    });
  }

  /** A paused run's workspace, before a sandbox is made on it: said plainly when it is gone. */
  private async checkKept(volume: string): Promise<void> {
    if (!volume.startsWith(VOLUME_PREFIX)) throw new Error(`not a workspace volume: ${volume}`);
    await this.docker
      .getVolume(volume)
      .inspect()
      .catch((err) => {
        throw status(err) === 404 ? new Error(`the run's kept workspace (volume ${volume}) is gone`) : err;
      });
  }

  /** Removes the container and what belongs to it alone; returns its workspace volume, if it had one. */
  private async removeContainer(id: string): Promise<string | undefined> {
    const container = this.docker.getContainer(id);
    const info = await container.inspect().catch((err) => (status(err) === 404 ? undefined : Promise.reject(err)));
    await container.remove({ force: true }).catch(ignoreMissing);
    this.diskImages.delete(id);
    this.outlivedEngine.delete(id);
    const runId = info?.Config?.Labels?.[LABELS.runId];
    if (runId)
      await fs.rm(socketDir(this.config.stateDir, runId), { recursive: true, force: true }).catch(() => undefined);
    this.release(id);
    return info && workspaceVolumeOf(info);
  }

  /**
   * Removes a workspace volume and then the loop device and image under it. An engine that
   * live-restored a run's container may have lost count of the volume's mounts (Docker before
   * 20.10.25, moby/moby#44422): it then refuses to remove a volume no container uses until its
   * own next restart, and leaves it mounted. No container uses it, so the disk under it is
   * unmounted and released anyway; the empty record goes with a sweep after that restart.
   */
  private async removeVolume(name: string): Promise<void> {
    const v = this.docker.getVolume(name);
    const info = await v.inspect().catch(() => undefined);
    const image = info?.Labels?.[DISK_IMAGE_LABEL];
    await v.remove().catch(async (err: Error) => {
      if (!/volume has active mounts/.test(err.message)) return ignoreMissing(err);
      logger.warn(
        { volume: name },
        "the engine miscounts this volume's mounts since it restarted (moby/moby#44422); its disk is released, the record goes after the engine's next restart",
      );
      if (image && info?.Mountpoint) await this.disks.unmountLeft(info.Mountpoint, image);
    });
    if (image) await this.disks.release({ image });
  }

  /**
   * One sample, no waiting for a second one (`one-shot`): memory without page cache, CPU time
   * from the cgroup, disk as the blocks the workspace image holds on the host.
   */
  async usage(id: string): Promise<SandboxUsage> {
    const stats = (await this.docker
      .getContainer(id)
      .stats({ stream: false, 'one-shot': true } as { stream: false })) as Docker.ContainerStats;
    const mem = stats.memory_stats ?? ({} as Docker.ContainerStats['memory_stats']);
    const cache = mem.stats?.total_inactive_file ?? mem.stats?.inactive_file ?? mem.stats?.cache ?? 0;
    const image = await this.diskImageOf(id);
    return {
      memoryBytes: Math.max(0, (mem.usage ?? 0) - cache),
      cpuMillis: Math.round((stats.cpu_stats?.cpu_usage?.total_usage ?? 0) / 1e6),
      diskBytes: image ? await this.disks.usedBytes(image).catch(() => 0) : 0,
    };
  }

  private async diskImageOf(id: string): Promise<string | undefined> {
    if (this.diskImages.has(id)) return this.diskImages.get(id);
    // A run found again after a restart: its volume's label names the image.
    const info = await this.docker.getContainer(id).inspect();
    const volume = info.Mounts?.find((m) => m.Type === 'volume' && m.Destination === WORKSPACE)?.Name;
    const image = volume
      ? (
          await this.docker
            .getVolume(volume)
            .inspect()
            .catch(() => undefined)
        )?.Labels?.[DISK_IMAGE_LABEL]
      : undefined;
    this.diskImages.set(id, image ?? '');
    return image;
  }

  async list(labels: Record<string, string>): Promise<SandboxInfo[]> {
    const found = await this.docker.listContainers({
      all: true,
      filters: JSON.stringify({ label: Object.entries(labels).map(([k, v]) => `${k}=${v}`) }),
    });
    return found.map((c) => ({ id: c.Id, labels: c.Labels ?? {}, running: c.State === 'running' }));
  }

  /**
   * Removes workspace volumes whose container is gone (the gateway died between the two), then
   * workspace images of this instance that no volume uses, with their loop devices.
   */
  async sweep(labels: Record<string, string>, kept: ReadonlySet<string> = new Set()): Promise<number> {
    const filters = JSON.stringify({ label: Object.entries(labels).map(([k, v]) => `${k}=${v}`) });
    const containers = await this.docker.listContainers({ all: true, filters });
    const withContainer = new Set(containers.map((c) => c.Labels?.[LABELS.runId]));
    // A resumed pooled run's container carries its own id; its volume, the pooled one's.
    const mounted = new Set(containers.flatMap((c) => (c.Mounts ?? []).map((m) => m.Name)));
    const { Volumes } = await this.docker.listVolumes({ filters });
    let removed = 0;
    const inUse = new Set<string>();
    for (const v of Volumes ?? []) {
      const runId = v.Labels?.[LABELS.runId];
      const leftover =
        v.Name.startsWith(VOLUME_PREFIX) &&
        runId &&
        !withContainer.has(runId) &&
        !mounted.has(v.Name) &&
        !kept.has(v.Name);
      if (!leftover) {
        if (v.Labels?.[DISK_IMAGE_LABEL]) inUse.add(v.Labels[DISK_IMAGE_LABEL]);
        continue;
      }
      await this.removeVolume(v.Name).then(() => removed++, ignoreMissing);
    }
    return removed + (await this.disks.sweep(inUse));
  }

  /** Lets go of a container without touching it. */
  private release(id: string): void {
    const entry = this.live.get(id);
    if (!entry) return;
    this.live.delete(id);
    entry.abort.abort();
    entry.stream?.destroy();
  }

  /** Detaches from every container; the runs themselves are stopped by the run manager. */
  async close(): Promise<void> {
    this.closed = true;
    this.lifetime.abort();
    for (const id of [...this.live.keys()]) this.release(id);
    this.events?.destroy();
    this.events = undefined;
    await this.disks.close();
  }
}
