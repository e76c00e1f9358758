import * as k8s from '@kubernetes/client-node';
import { createReadStream, promises as fs } from 'node:fs';
import * as path from 'node:path';
import type { Readable } from 'node:stream';
import type { GatewayConfig } from '../../config';
import { logger } from '../../log';
import { bootRunner, runSecret } from '../boot';
import { resolveImage } from '../image';
import {
  LABELS,
  SandboxPreconditionError,
  type ProviderCapabilities,
  type RunnerStream,
  type Sandbox,
  type SandboxExit,
  type SandboxInfo,
  type SandboxProvider,
  type SandboxSpec,
} from '../provider';
import { stripTarPrefix, withConfinedArchive } from '../tarFilter';
import { listenHost, noAddressReason, podAddress } from './podAddress';
import { eventsAbout, eventTime } from './events';
import { podExit, startFailure } from './podExit';
import { CONTAINER, podName, runLabels, runPod, SOCKET_PATH, TERMINATION_MESSAGE_PATH, WORKSPACE } from './podSpec';
import { exitCodeOf, openAttach, openExec, type PodStream } from './streams';
import { KubernetesTemplateImages } from './templateImages';
import { claimName, WorkspaceClaims } from './workspaceVolume';

/**
 * The connector each gateway replica execs into a run's pod: it relays its own stdio to the
 * runner's Unix socket, so the connection passes the runner's challenge like any other and
 * needs no pod network. `node -e` with an argument: the socket path is argv[1].
 */
const CONNECTOR = [
  "const s=require('net').connect(process.argv[1]);",
  "s.on('connect',()=>{process.stdin.pipe(s);s.pipe(process.stdout);});",
  "s.on('error',(e)=>{process.stderr.write(e.message);process.exit(3);});",
  "s.on('close',()=>process.exit(0));process.stdin.on('end',()=>s.end());",
].join('');

const status = (err: unknown) =>
  (err as { statusCode?: number }).statusCode ?? (err as { response?: { statusCode?: number } }).response?.statusCode;
const bodyMessage = (err: unknown) =>
  (err as { body?: { message?: string } }).body?.message ?? (err as Error).message ?? String(err);

interface Live {
  runId: string;
  settle: (exit: SandboxExit) => void;
  /** Streams this gateway holds into the pod, closed when the pod ends. */
  streams: Set<PodStream>;
  /** Set when the container ended before the pod's final status: ends the run if that never comes. */
  provisional?: NodeJS.Timeout;
}

const FINAL_STATUS_WAIT_MS = 3000;
/** Event reasons that say why Kubernetes ended a pod. */
const CAUSES = ['Evicted', 'OOMKilling', 'Preempting', 'TaintManagerEviction', 'NodeNotReady', 'Killing'];

/**
 * One pod per run: the gateway boots the runner over an attach to its stdin (the only time the
 * run's secret is sent), and every later connection — from this replica or any other — is
 * authenticated by the runner's challenge. With the `exec` transport a connection is an exec of
 * a small connector relaying to the runner's Unix socket, through the API server, and the run
 * needs no pod network at all; with `tcp` it goes to the pod's address, where the runner
 * listens as well, for clusters whose CNI enforces the runs' NetworkPolicy.
 */
export class KubernetesProvider implements SandboxProvider {
  readonly name = 'kubernetes';
  /** Replicas are stateless: every one serves every run, and a run outlives the replica that created it. */
  readonly capabilities: ProviderCapabilities;
  readonly kc: k8s.KubeConfig;
  private readonly core: k8s.CoreV1Api;
  private readonly ns: string;
  private readonly live = new Map<string, Live>();
  /** Set when runs get a claim of their own as workspace (`kubernetes.workspace.storageClassName`). */
  private readonly claims?: WorkspaceClaims;
  private watchAbort?: { abort(): void };
  private watching?: Promise<void>;
  private closed = false;

  constructor(private readonly config: GatewayConfig) {
    this.kc = loadKubeConfig(config.kubernetes.kubeconfig);
    this.core = this.kc.makeApiClient(k8s.CoreV1Api);
    this.ns = config.kubernetes.namespace;
    this.capabilities = {
      sharedState: true,
      keepsRunsOnShutdown: true,
      egress: {
        carried: false,
        reason: 'the kubernetes provider cannot carry egress yet (only the docker provider can)',
      },
      templateImages: new KubernetesTemplateImages(config.kubernetes.templates),
      // Only a claim outlives its pod: an emptyDir goes with it, so such runs cannot be paused.
      ...(config.kubernetes.workspace.storageClassName
        ? { pauseDepths: ['portable'] as const }
        : {
            noPauseReason:
              'its workspace is an emptyDir, which goes with its pod (set kubernetes.workspace.storageClassName to keep workspaces on claims)',
          }),
    };
    const storage = config.kubernetes.workspace;
    if (storage.storageClassName) this.claims = new WorkspaceClaims(this.core, this.ns, storage);
  }

  private get user(): { uid: number; gid: number } {
    const [u, g] = this.config.kubernetes.user.split(':');
    const uid = Number(u);
    const gid = Number(g ?? u);
    return { uid: Number.isInteger(uid) && uid > 0 ? uid : 1000, gid: Number.isInteger(gid) && gid > 0 ? gid : 1000 };
  }

  async create(spec: SandboxSpec): Promise<Sandbox> {
    if (spec.hostWorkspace) throw new Error('a host workspace cannot be mounted into a pod (the kubernetes provider)');
    if (spec.egress) throw new Error('egress is not available with the kubernetes provider');
    const image = spec.image || this.config.kubernetes.image || resolveImage(this.config);
    if (!image) throw new Error('no runner image configured: set kubernetes.image (TETHER_K8S_IMAGE)');
    await this.watch();
    const pod = runPod(spec, {
      namespace: this.ns,
      image,
      ...this.user,
      runtimeClassName: this.config.kubernetes.runtimeClassName,
      ephemeralOverheadMb: this.config.kubernetes.ephemeralOverheadMb,
      runnerPort: this.tcpPort,
      workspaceClaim: this.claims ? (spec.keptWorkspace ?? claimName(podName(spec.runId))) : undefined,
    });
    const kept = spec.keptWorkspace;
    if (kept && !this.claims) throw new Error('a kept workspace needs kubernetes.workspace.storageClassName');
    const name = pod.metadata!.name!;
    let created: k8s.V1Pod;
    try {
      created = (await this.core.createNamespacedPod(this.ns, pod)).body;
    } catch (err) {
      throw new Error(`could not create pod ${name}: ${bodyMessage(err)}`);
    }
    try {
      if (kept) await this.claims!.adopt(kept, created);
      if (this.claims)
        await this.claims.waitBound(kept ?? (await this.claims.create(created, spec.limits.diskMb ?? 0)), name);
      const sandbox = this.sandbox(name, spec.runId, await runSecret(this.config.stateDir, spec.runId));
      const running = await this.waitRunning(name, this.config.runs.startTimeoutSeconds * 1000);
      const port = this.tcpPort;
      const tcp = port ? { host: listenHost(podAddress(running)), port } : undefined;
      await this.boot(name, sandbox.secret, tcp);
      if (!port) return sandbox;
      // The address is normally there once the pod runs; read again in case its report lagged.
      const pod = podAddress(running) ? running : (await this.core.readNamespacedPod(name, this.ns)).body;
      const address = podAddress(pod);
      if (!address)
        throw new SandboxPreconditionError(`${noAddressReason(pod)} (its runner listens on ${tcp!.host}:${port})`);
      return overTcp(sandbox, { host: address, port });
    } catch (err) {
      // A resume that failed gives its workspace back to the pause, never to the bin.
      await (kept ? this.park(name) : this.remove(name)).catch(() => undefined);
      throw err;
    }
  }

  /** The runner's TCP port with the `tcp` transport; undefined with `exec`. */
  private get tcpPort(): number | undefined {
    return this.config.kubernetes.transport === 'tcp' ? this.config.kubernetes.runnerPort : undefined;
  }

  /**
   * Hands the runner its boot line over an attach to its stdin, reads its hello, and lets go
   * of the attach: the runner's stdin stays open (`stdinOnce: false`) but nothing is sent on
   * it again. The Unix socket is always asked for: it is how another replica's attach knows
   * the runner has booted, and the connector's way in.
   */
  private async boot(name: string, secret: Buffer, tcp?: { host: string; port: number }): Promise<void> {
    const attach = await openAttach(this.kc, { namespace: this.ns, pod: name, container: CONTAINER });
    try {
      const hello = await bootRunner(
        attach.stdin,
        attach.stdout,
        secret,
        { unix: SOCKET_PATH, ...(tcp ? { tcp } : {}) },
        this.config.runs.startTimeoutSeconds * 1000,
        // Any OOM kill in the pod ends the run, on cgroup v1 as on v2 (see podExit).
        { oomExit: { messagePath: TERMINATION_MESSAGE_PATH } },
      );
      const reason = () => hello.errors.join('; ') || 'no reason given';
      if (!hello.listening.unix) throw new Error(`the runner did not listen on ${SOCKET_PATH}: ${reason()}`);
      if (tcp && !hello.listening.tcp)
        throw new Error(`the runner did not listen on TCP ${tcp.host}:${tcp.port}: ${reason()}`);
    } finally {
      attach.close();
    }
  }

  /** Polls until the pod runs; fails at once where Kubernetes already says it never will. */
  private async waitRunning(name: string, timeoutMs: number): Promise<k8s.V1Pod> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const pod = (await this.core.readNamespacedPod(name, this.ns)).body;
      const ended = podExit(pod);
      if (ended) throw new Error(`the pod ended before it ran: ${ended.reason}`);
      const never = startFailure(pod);
      if (never) throw new Error(`the pod cannot start: ${never}`);
      const running = pod.status?.containerStatuses?.find((c) => c.name === CONTAINER)?.state?.running;
      if (pod.status?.phase === 'Running' && running) return pod;
      if (Date.now() > deadline) {
        const why = pod.status?.conditions?.find((c) => c.status !== 'True' && c.message)?.message;
        throw new Error(`pod ${name} did not start within ${timeoutMs} ms${why ? `: ${why}` : ''}`);
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /** Polls (by exec) until the runner's socket exists in the pod. */
  private async waitSocket(name: string, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const probe = await openExec(this.kc, { namespace: this.ns, pod: name, container: CONTAINER }, [
        'test',
        '-S',
        SOCKET_PATH,
      ]);
      probe.stdin.end();
      const s = await probe.done;
      probe.close();
      if (exitCodeOf(s) === 0) return;
      if (Date.now() > deadline) throw new Error(`the runner in pod ${name} never listened on ${SOCKET_PATH}`);
      await new Promise((r) => setTimeout(r, 300));
    }
  }

  private sandbox(name: string, runId: string, secret: Buffer): Sandbox {
    let settle!: (exit: SandboxExit) => void;
    const exited = new Promise<SandboxExit>((r) => (settle = r));
    const entry: Live = { runId, settle, streams: new Set() };
    this.live.set(name, entry);
    const target = { namespace: this.ns, pod: name, container: CONTAINER };
    return {
      id: name,
      runId,
      workspacePath: WORKSPACE,
      ...(this.claims ? { keepable: claimName(name) } : {}),
      secret,
      noSocketReason: undefined,
      dial: () => this.dial(entry, target),
      stdio: () =>
        Promise.reject(
          new Error("a run pod's stdio carries only its boot line: connections go through the runner's socket"),
        ),
      exited,
      putArchive: (rel: string, tar: Readable) => this.putArchive(name, rel, tar),
      getArchive: (rel: string) => this.getArchive(name, rel),
    };
  }

  /** A new connection to the runner's socket: the connector, exec'd in the pod. */
  private async dial(
    entry: Live,
    target: { namespace: string; pod: string; container: string },
  ): Promise<RunnerStream> {
    const stream = await openExec(this.kc, target, ['node', '-e', CONNECTOR, SOCKET_PATH]);
    entry.streams.add(stream);
    void stream.done.then((s) => {
      entry.streams.delete(stream);
      if (s.status !== 'Success' && stream.stderr())
        logger.debug({ runId: entry.runId, connector: stream.stderr().trim() }, 'runner connector ended');
    });
    return { readable: stream.stdout, writable: stream.stdin, close: () => stream.close() };
  }

  /**
   * All or nothing: the confined archive is spooled first; only one that passed every check
   * is streamed into `tar` in the pod. `head -c` hands tar exactly the archive and then EOF,
   * whatever the stream protocol can say about closing stdin.
   */
  private async putArchive(name: string, rel: string, tar: Readable): Promise<void> {
    await withConfinedArchive(tar, { prefix: rel, ...this.user }, async (spooled) => {
      const { size } = await fs.stat(spooled);
      const script = 'head -c "$0" | tar -x -f - -C "$1" --no-same-owner --no-overwrite-dir';
      await this.execWithInput(name, ['sh', '-c', script, String(size), WORKSPACE], createReadStream(spooled));
    });
  }

  private async execWithInput(name: string, command: string[], input: Readable): Promise<void> {
    const stream = await openExec(this.kc, { namespace: this.ns, pod: name, container: CONTAINER }, command);
    stream.stdout.resume();
    input.pipe(stream.stdin);
    const s = await stream.done;
    stream.close();
    if (exitCodeOf(s) !== 0) throw new Error(`unpacking in the pod failed: ${stream.stderr().trim() || s.message}`);
  }

  /**
   * A tar stream of a workspace path, entries named after its last component as the Docker
   * provider's are (the root's entries without a prefix). Resolves once tar has produced its
   * first bytes, so a missing path is an error here rather than an empty archive.
   */
  private async getArchive(name: string, rel: string): Promise<Readable> {
    const norm = rel ? path.posix.normalize(rel).replace(/\/$/, '') : '';
    if (path.posix.isAbsolute(norm) || norm === '..' || norm.startsWith('../'))
      throw new Error(`path escapes the workspace: ${rel}`);
    const [dir, base] =
      norm && norm !== '.'
        ? [path.posix.join(WORKSPACE, path.posix.dirname(norm)), path.posix.basename(norm)]
        : [path.posix.dirname(WORKSPACE), path.posix.basename(WORKSPACE)];
    const stream = await openExec(this.kc, { namespace: this.ns, pod: name, container: CONTAINER }, [
      'tar',
      '-c',
      '-f',
      '-',
      '-C',
      dir,
      '--',
      base,
    ]);
    const out = stream.stdout;
    const first = await Promise.race([
      new Promise<Buffer | null>((resolve) => {
        out.once('readable', () => resolve(out.read() as Buffer | null));
      }),
      stream.done.then(() => null),
    ]);
    if (!first) {
      const s = await stream.done;
      stream.close();
      if (exitCodeOf(s) !== 0)
        throw new Error(`no such path in the workspace: ${rel} (${stream.stderr().trim() || s.message})`);
    } else out.unshift(first);
    void stream.done.then((s) => {
      if (exitCodeOf(s) !== 0)
        out.destroy(new Error(`reading the workspace failed: ${stream.stderr().trim() || s.message}`));
    });
    return norm && norm !== '.' ? out : stripTarPrefix(out, base);
  }

  async attach(id: string): Promise<Sandbox> {
    await this.watch();
    const pod = (await this.core.readNamespacedPod(id, this.ns)).body;
    const ended = podExit(pod);
    if (ended) throw new Error(`pod ${id} has ended: ${ended.reason}`);
    const runId = runLabels(pod)[LABELS.runId] ?? '';
    if (!runId) throw new Error(`pod ${id} names no run`);
    const sandbox = this.sandbox(id, runId, await runSecret(this.config.stateDir, runId));
    // A pod another replica is still starting: wait until it runs and that replica has booted
    // its runner, so that a failed first connection is never taken for a dead run.
    const timeoutMs = this.config.runs.startTimeoutSeconds * 1000;
    await this.waitRunning(id, timeoutMs);
    await this.waitSocket(id, timeoutMs);
    const port = this.tcpPort;
    if (!port) return sandbox;
    const booted = (await this.core.readNamespacedPod(id, this.ns)).body;
    const address = podAddress(booted);
    if (!address) throw new Error(noAddressReason(booted));
    return overTcp(sandbox, { host: address, port });
  }

  /** A pod cannot be stopped and kept: stopping a run deletes its pod. */
  async stop(id: string): Promise<void> {
    await this.remove(id);
  }

  async remove(id: string): Promise<void> {
    await this.deletePod(id);
    // Its owner reference would have the garbage collector do it too; the run's end should not wait for that.
    await this.claims?.delete(claimName(id));
  }

  private async deletePod(id: string): Promise<void> {
    this.release(id);
    try {
      await this.core.deleteNamespacedPod(id, this.ns, undefined, undefined, 0);
    } catch (err) {
      if (status(err) !== 404) throw err;
    }
  }

  /**
   * A portable pause: the claim is kept (first, so that a gateway dying in between leaves it
   * kept, never collected), then the pod is deleted and waited for, since the resumed run's pod
   * has the same name and no process of a paused run may be left.
   */
  async park(id: string): Promise<string> {
    if (!this.claims) throw new Error('a run on an emptyDir workspace cannot be paused: its files go with its pod');
    const claim = claimName(id);
    await this.claims.keep(claim);
    await this.deletePod(id);
    const deadline = Date.now() + this.config.runs.startTimeoutSeconds * 1000;
    for (;;) {
      try {
        await this.core.readNamespacedPod(id, this.ns);
      } catch (err) {
        if (status(err) === 404) return claim;
        throw err;
      }
      if (Date.now() > deadline)
        throw new Error(`pod ${id} was not gone within ${this.config.runs.startTimeoutSeconds} s of its deletion`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  async dropWorkspace(handle: string): Promise<void> {
    await this.claims?.delete(handle);
  }

  /** Workspace claims whose pod is gone, except those paused runs keep. */
  async sweep(labels: Record<string, string>, kept?: ReadonlySet<string>): Promise<number> {
    if (!this.claims) return 0;
    return this.claims.sweep(
      Object.entries(labels)
        .map(([k, v]) => `${k}=${v}`)
        .join(','),
      kept,
    );
  }

  async list(labels: Record<string, string>): Promise<SandboxInfo[]> {
    const selector = Object.entries(labels)
      .map(([k, v]) => `${k}=${v}`)
      .join(',');
    const { body } = await this.core.listNamespacedPod(this.ns, undefined, undefined, undefined, undefined, selector);
    return body.items.map((pod) => ({
      id: pod.metadata!.name!,
      labels: runLabels(pod),
      // A pod still being started (by another replica) counts as running: it is not an orphan.
      running: !podExit(pod),
    }));
  }

  /**
   * One watch over this instance's pods: a pod deleted, evicted, OOM-killed or failed ends its
   * run at once, with Kubernetes' reason. The watch is renewed when the API server ends it,
   * and every pod held is read again then (an event may have been missed in between).
   */
  private watch(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.watching ??= this.startWatch().catch((err) => {
      this.watching = undefined;
      throw err;
    });
    return this.watching;
  }

  private async startWatch(): Promise<void> {
    const selector = `${LABELS.managed}=true,${LABELS.instance}=${this.config.instance}`;
    const renew = () => {
      this.watching = undefined;
      this.watchAbort = undefined;
      if (this.closed) return;
      setTimeout(() => {
        if (this.closed) return;
        void this.watch()
          .then(() => this.recheck())
          .catch((err: Error) => logger.warn({ err: err.message }, 'pod watch could not be renewed'));
      }, 500).unref();
    };
    const req = await new k8s.Watch(this.kc).watch(
      `/api/v1/namespaces/${this.ns}/pods`,
      { labelSelector: selector, allowWatchBookmarks: true },
      (type: string, pod: k8s.V1Pod) => {
        const name = pod?.metadata?.name;
        const entry = name ? this.live.get(name) : undefined;
        if (!name || !entry) return;
        if (type === 'DELETED')
          return this.ended(name, podExit(pod) ?? { reason: 'the pod was deleted', oomKilled: false, exitCode: null });
        const exit = podExit(pod);
        if (!exit) return;
        // The container's end is often reported before the pod's own status says why (an
        // eviction): a moment's wait for the final phase gets Kubernetes' reason.
        const final =
          pod.status?.phase === 'Failed' || pod.status?.phase === 'Succeeded' || !!pod.metadata?.deletionTimestamp;
        if (final) return this.ended(name, exit);
        entry.provisional ??= setTimeout(() => this.ended(name, exit), FINAL_STATUS_WAIT_MS);
      },
      () => renew(),
    );
    this.watchAbort = req as { abort(): void };
  }

  /** Reads every held pod again; one gone or ended ends its run. */
  private async recheck(): Promise<void> {
    for (const name of [...this.live.keys()]) {
      try {
        const pod = (await this.core.readNamespacedPod(name, this.ns)).body;
        const exit = podExit(pod);
        if (exit) this.ended(name, exit);
      } catch (err) {
        if (status(err) === 404) this.ended(name, { reason: 'the pod was deleted', oomKilled: false, exitCode: null });
      }
    }
  }

  private ended(name: string, exit: SandboxExit): void {
    const entry = this.live.get(name);
    if (!entry) return;
    clearTimeout(entry.provisional);
    // Taken out of `live` now, so that later events do not end it twice.
    this.live.delete(name);
    void this.explained(name, exit).then((final) => {
      logger.warn({ runId: entry.runId, reason: final.reason }, 'run pod ended');
      entry.settle(final);
      for (const s of entry.streams) s.close();
    });
  }

  /**
   * The kubelet does not always leave an eviction's cause on the pod (a runner that exits 0
   * on SIGTERM makes the pod Succeeded), but it always records an Event: its words are added.
   */
  private async explained(name: string, exit: SandboxExit): Promise<SandboxExit> {
    if (exit.oomKilled || /Evicted|DisruptionTarget|TerminationByKubelet|DeletionByTaintManager/.test(exit.reason))
      return exit;
    const cause = (await eventsAbout(this.core, this.ns, 'Pod', name))
      .filter((e) => e.type === 'Warning' && CAUSES.includes(e.reason ?? ''))
      .sort((x, y) => eventTime(y) - eventTime(x))[0];
    return cause ? { ...exit, reason: `${cause.reason}: ${cause.message ?? ''}; ${exit.reason}` } : exit;
  }

  /** Lets go of a pod without touching it: its streams close, its exit is never reported. */
  private release(name: string): void {
    const entry = this.live.get(name);
    if (!entry) return;
    this.live.delete(name);
    clearTimeout(entry.provisional);
    for (const s of entry.streams) s.close();
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const name of [...this.live.keys()]) this.release(name);
    this.watchAbort?.abort();
  }
}

/** A run's sandbox reached over TCP at its pod's address: no connector exec, no stdio fallback. */
function overTcp(sandbox: Sandbox, target: { host: string; port: number }): Sandbox {
  return { ...sandbox, dial: undefined, socket: target, socketOnly: true };
}

/** The cluster's credentials: a named kubeconfig, else in-cluster, else the default places. */
export function loadKubeConfig(file: string): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  if (file) kc.loadFromFile(file);
  else kc.loadFromDefault();
  if (!kc.getCurrentCluster())
    throw new Error('no Kubernetes cluster configured: set kubernetes.kubeconfig (KUBECONFIG)');
  return kc;
}
