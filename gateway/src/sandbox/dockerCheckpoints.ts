import { existsSync, promises as fs } from 'node:fs';
import * as path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type Docker from 'dockerode';
import { QUIESCE_WAKE_SIGNAL } from '../../../protocol/src/transport';
import { LABELS, type MemoryCheckpoints, type Sandbox } from './provider';

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
}

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
    const name = `tether-${Date.now().toString(36)}`;
    const container = this.deps.docker.getContainer(id);
    // The runner removes its socket file last, once its connections and listener are closed.
    const socket = this.deps.socketOf(await this.runIdOf(container));
    for (const until = Date.now() + 2000; existsSync(socket) && Date.now() < until; ) await sleep(5);
    await withCheckpoints(container).createCheckpoint({ CheckpointID: name, Exit: true });
    this.deps.release(id);
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
