import { existsSync, promises as fs } from 'node:fs';
import * as path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type Docker from 'dockerode';
import { QUIESCE_WAKE_SIGNAL } from '../../../protocol/src/transport';
import { runHelper } from './dockerHelper';
import { LABELS, type MemoryCheckpoints, type Sandbox, type SandboxSpec } from './provider';

/** Whether this engine takes memory checkpoints of the runs' containers, and why not. */
export interface CheckpointSupport {
  ok: boolean;
  why: string;
}

/**
 * The engine's checkpoint API (`docker checkpoint create`, `docker start --checkpoint`) works
 * only on an engine started with experimental features, and only for a runtime that can save a
 * running sandbox: gVisor's runsc here (CRIU, runc's way, fails on this kernel). The runtime is
 * told by the binary the engine runs for it, not by the name it was registered under.
 */
export async function checkpointSupport(docker: Docker, runtime: string): Promise<CheckpointSupport> {
  const [version, info] = await Promise.all([docker.version(), docker.info()]);
  const name = runtime || (info as { DefaultRuntime?: string }).DefaultRuntime || 'runc';
  const runtimes = (info as { Runtimes?: Record<string, { path?: string }> }).Runtimes ?? {};
  const binary = runtimes[name]?.path ?? name;
  if (!/runsc/.test(path.basename(binary)))
    return {
      ok: false,
      why: `the runtime ${name} (${binary}) cannot checkpoint a running sandbox; gVisor's runsc can`,
    };
  if (!(version as { Experimental?: boolean }).Experimental)
    return {
      ok: false,
      why: 'the engine runs without experimental features: its checkpoint API is off (daemon.json "experimental": true; scripts/setup.sh with TETHER_WITH_RUNSC=1)',
    };
  return { ok: true, why: `${name} (${binary}) through the engine's checkpoint API` };
}

/** dockerode has these calls; its types do not declare them. */
interface WithCheckpoints {
  createCheckpoint(opts: { CheckpointID: string; Exit: boolean }): Promise<unknown>;
  deleteCheckpoint(name: string): Promise<unknown>;
}
const withCheckpoints = (c: Docker.Container) => c as unknown as WithCheckpoints;

export interface DockerCheckpointsDeps {
  docker: Docker;
  /** Where a run's runner socket appears on this side. */
  socketOf(runId: string): string;
  /** The sandbox of a running container, reached through its socket. */
  attach(id: string): Promise<Sandbox>;
  /** Lets go of a container the provider watches (it stopped on purpose). */
  release(id: string): void;
  /** Why this container cannot be checkpointed, known before its runner is quiesced. */
  refusal(id: string): string | undefined;
  /** How long a runner may take to listen again. */
  timeoutMs: number;
  /**
   * A new, stopped container for `spec`'s run on its kept workspace, like the one `source` runs
   * in (a checkpoint restores only into the same command, mounts and limits); returns its id.
   */
  createCopy(spec: SandboxSpec, source: string): Promise<string>;
  /** Removes a container, keeping its workspace. */
  discard(id: string): Promise<void>;
  /**
   * The gateway's own runner image, for the helper that hands a checkpoint to copies: it runs
   * as root with the engine's containers directory mounted, so never from a run's (template's)
   * image, whose files a tenant may have chosen.
   */
  helperImage(): string | undefined;
}

/** The engine's own directory for its containers (`<data-root>/containers`), on the host. */
const containersDir = async (docker: Docker) =>
  path.join(((await docker.info()) as { DockerRootDir?: string }).DockerRootDir || '/var/lib/docker', 'containers');

/**
 * Gives each of the containers after the first four arguments the checkpoint `$2` of container
 * `$1`, under the same name: the image's files hard-linked into each container's own directory
 * (no byte copied; deploy/runsc/runsc-tether restores from there and removes them), or, for an
 * image the runtime left in the engine's checkpoint folder, that folder's files. `$3` is where
 * the engine's containers directory is on the host, mounted here at /c; `$4` is `keep` when the
 * source's checkpoint stays whole for more copies.
 */
const LINK_CHECKPOINT = `set -eu
src="$1"; name="$2"; root="$3"; keep="$4"; shift 4
from="/c/$src/checkpoints/$name"
[ -d "$from" ] || { echo "container $src has no checkpoint $name" >&2; exit 1; }
image=""
if [ -f "$from/tether-image" ]; then
  image="$(head -n1 "$from/tether-image")"
  case "$image" in "$root/$src/tether-memory/"*) ;; *) echo "checkpoint $name names no image of its container: $image" >&2; exit 1 ;; esac
  [ -f "/c/\${image#"$root/"}/checkpoint.img" ] || { echo "the image of checkpoint $name is gone" >&2; exit 1; }
fi
for id in "$@"; do
  mkdir -p "/c/$id/checkpoints/$name"
  if [ -n "$image" ]; then
    to="$id/tether-memory/\${image##*/}"
    mkdir -p "/c/$to"
    ln "/c/\${image#"$root/"}"/* "/c/$to/"
    printf '%s\n' "$root/$to" >"/c/$id/checkpoints/$name/tether-image"
  else
    ln "$from"/* "/c/$id/checkpoints/$name/"
  fi
done
# Each copy holds its own links: the source's are not needed any more, unless it is kept.
if [ -n "$image" ] && [ "$keep" != keep ]; then rm -rf "/c/\${image#"$root/"}"; fi
`;

/**
 * Memory checkpoints of a run's container through the engine. The checkpoint stops the
 * container and is kept in the container's own directory: removing the container removes it.
 */
export class DockerCheckpoints implements MemoryCheckpoints {
  constructor(private readonly deps: DockerCheckpointsDeps) {}

  refusal(id: string): string | undefined {
    return this.deps.refusal(id);
  }

  async checkpoint(id: string): Promise<string> {
    const name = await this.take(id, true);
    // The engine answers before it has seen the sandbox end, and refuses to start (restore) a
    // container it still thinks runs.
    await this.deps.docker.getContainer(id).wait({ condition: 'not-running' });
    this.deps.release(id);
    return name;
  }

  snapshot(id: string): Promise<string> {
    return this.take(id, false);
  }

  async copies(
    id: string,
    checkpoint: string,
    specs: SandboxSpec[],
    copied: Promise<void>,
    keep = false,
  ): Promise<PromiseSettledResult<Sandbox>[]> {
    const { docker } = this.deps;
    const source = await docker.getContainer(id).inspect();
    const made = await Promise.allSettled(specs.map((spec) => this.deps.createCopy(spec, id)));
    const ids = made.flatMap((m) => (m.status === 'fulfilled' ? [m.value] : []));
    try {
      if (ids.length) {
        const image = this.deps.helperImage();
        if (!image) throw new Error('no runner image configured for the checkpoint helper');
        const root = await containersDir(docker);
        await runHelper(docker, 'handing the checkpoint to the copies', {
          name: `tether-link-${source.Name.replace(/^\//, '')}-${checkpoint}`,
          Image: image,
          Entrypoint: ['sh', '-c', LINK_CHECKPOINT, 'link'],
          Cmd: [source.Id, checkpoint, root, keep ? 'keep' : 'use', ...ids],
          // Root, to write into the engine's directories; nothing else: no network, no capability.
          User: '0:0',
          Labels: { [LABELS.managed]: 'true', [LABELS.instance]: source.Config.Labels?.[LABELS.instance] ?? '' },
          NetworkDisabled: true,
          HostConfig: {
            NetworkMode: 'none',
            CapDrop: ['ALL'],
            SecurityOpt: ['no-new-privileges'],
            ReadonlyRootfs: true,
            PidsLimit: 32,
            Memory: 64 * 1024 * 1024,
            Mounts: [{ Type: 'bind', Source: root, Target: '/c' }],
          },
        });
      }
      // The files the checkpoint holds open must be in each copy before it starts.
      await copied;
    } catch (err) {
      await Promise.all(ids.map((copy) => this.deps.discard(copy).catch(() => undefined)));
      throw err;
    } finally {
      if (!keep) await this.drop(id, checkpoint).catch(() => undefined);
    }
    return Promise.allSettled(
      made.map(async (m) => {
        if (m.status === 'rejected') throw m.reason;
        try {
          return await this.restore(m.value, checkpoint);
        } catch (err) {
          await this.deps.discard(m.value).catch(() => undefined);
          throw err;
        }
      }),
    );
  }

  /** A checkpoint of the quiesced runner's container; with `exit` the container stops. */
  private async take(id: string, exit: boolean): Promise<string> {
    const name = `tether-${Date.now().toString(36)}`;
    const container = this.deps.docker.getContainer(id);
    // The runner removes its socket file last, once its connections and listener are closed.
    const socket = this.deps.socketOf(await this.runIdOf(container));
    for (const until = Date.now() + 2000; existsSync(socket) && Date.now() < until; ) await sleep(5);
    await withCheckpoints(container).createCheckpoint({ CheckpointID: name, Exit: exit });
    return name;
  }

  async restore(id: string, checkpoint: string): Promise<Sandbox> {
    const container = this.deps.docker.getContainer(id);
    const runId = await this.runIdOf(container);
    // A socket file left behind would be taken for the runner listening again.
    await fs.rm(this.deps.socketOf(runId), { force: true });
    // In the query only: the engine refuses a start with a body.
    await container.start({ _query: { checkpoint }, _body: {} } as object);
    return this.woken(container, runId);
  }

  async wake(id: string): Promise<Sandbox> {
    const container = this.deps.docker.getContainer(id);
    return this.woken(container, await this.runIdOf(container));
  }

  /**
   * The checkpoint's image (the folder runsc-tether wrote, named by the checkpoint's stub), or
   * the checkpoint folder itself: read on this side, so only a gateway that sees the engine's
   * directory (on the host, as root) can tell.
   */
  async sizeOf(id: string, checkpoint: string): Promise<number | undefined> {
    const container = await this.deps.docker.getContainer(id).inspect();
    const root = await containersDir(this.deps.docker);
    const folder = path.join(root, container.Id, 'checkpoints', checkpoint);
    const stub = await fs.readFile(path.join(folder, 'tether-image'), 'utf8').catch(() => '');
    const image = stub.split('\n')[0].trim();
    return folderBytes(image.startsWith(path.join(root, container.Id, 'tether-memory')) ? image : folder);
  }

  async drop(id: string, checkpoint: string): Promise<void> {
    await withCheckpoints(this.deps.docker.getContainer(id)).deleteCheckpoint(checkpoint);
  }

  /** Signals the quiesced runner (PID 1 passes it on) and waits for its socket to be back. */
  private async woken(container: Docker.Container, runId: string): Promise<Sandbox> {
    await container.kill({ _query: { signal: QUIESCE_WAKE_SIGNAL }, _body: {} } as object);
    const socket = this.deps.socketOf(runId);
    const until = Date.now() + this.deps.timeoutMs;
    while (!existsSync(socket)) {
      if (Date.now() > until) throw new Error(`the runner did not listen again within ${this.deps.timeoutMs} ms`);
      await sleep(5);
    }
    // The watch of the container before the checkpoint ends here; `attach` starts a new one.
    this.deps.release(container.id);
    return this.deps.attach(container.id);
  }

  private async runIdOf(container: Docker.Container): Promise<string> {
    const info = await container.inspect();
    const runId = info.Config.Labels?.[LABELS.runId];
    if (!runId) throw new Error(`container ${container.id} belongs to no run`);
    return runId;
  }
}

/** Bytes the files of a folder take on disk; undefined where it cannot be read. */
async function folderBytes(dir: string): Promise<number | undefined> {
  try {
    let total = 0;
    for (const e of await fs.readdir(dir, { withFileTypes: true }))
      if (e.isFile()) total += (await fs.stat(path.join(dir, e.name))).blocks * 512;
    return total;
  } catch {
    return undefined;
  }
}
