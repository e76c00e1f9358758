import * as k8s from '@kubernetes/client-node';
import { createReadStream, promises as fs } from 'node:fs';
import * as path from 'node:path';
import type { Readable } from 'node:stream';
import { defaultLimits, type GatewayConfig } from '../../config';
import { logger } from '../../log';
import { bootRunner, runSecret } from '../boot';
import { resolveImage } from '../image';
import {
  LABELS,
  SandboxExistsError,
  SandboxPreconditionError,
  type ProviderCapabilities,
  type RunnerStream,
  type Sandbox,
  type SandboxChange,
  type SandboxExit,
  type SandboxInfo,
  type SandboxProvider,
  type SandboxSpec,
} from '../provider';
import { EGRESS_MOUNT, EGRESS_SOCKET, egressSocketDir } from '../../egress/service';
import { AgentSandboxRuns, SANDBOX_CLAIM_ANNOTATION } from './agentSandbox';
import { ApiCounter } from './apiCounter';
import { CARRIER_SCRIPT, EgressCarrier } from './egressCarrier';
import { PodInformer } from './podInformer';
import { KubernetesPool } from './pool';
import { stripTarPrefix, withConfinedArchive } from '../tarFilter';
import { listenHost, noAddressReason, podAddress } from './podAddress';
import { eventsAbout, eventTime } from './events';
import { podExit, startFailure } from './podExit';
import {
  BOOT_ID_ANNOTATION,
  BOOTED_ANNOTATION,
  bootId,
  CLAIM_ANNOTATION,
  CONTAINER,
  hasEgress,
  LABELS_ANNOTATION,
  type PodOptions,
  POOL_STATE_LABEL,
  podName,
  runLabels,
  runPod,
  selectorLabels,
  SOCKET_PATH,
  TERMINATION_MESSAGE_PATH,
  WORKSPACE,
} from './podSpec';
import { exitCodeOf, openAttach, openExec, type PodStream } from './streams';
import { KubernetesTemplateImages } from './templateImages';
import { claimName, PausedOnClaims, WorkspaceClaims } from './workspaceVolume';
import { WorkspaceCopier } from './workspaceCopy';
import { bodyMessage, mergePatchPodMetadata, statusOf } from './apiErrors';

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

interface Live {
  /** For the log: the run it serves (a pooled pod's changes when it is claimed). */
  runId: string;
  settle: (exit: SandboxExit) => void;
  /** Streams this gateway holds into the pod, closed when the pod ends. */
  streams: Set<PodStream>;
  /** Set when the container ended before the pod's final status: ends the run if that never comes. */
  provisional?: NodeJS.Timeout;
  /** The run's egress, carried to this gateway's proxy for it. */
  carrier?: EgressCarrier;
}

const FINAL_STATUS_WAIT_MS = 3000;
/** Event reasons that say why Kubernetes ended a pod. */
const CAUSES = ['Evicted', 'OOMKilling', 'Preempting', 'TaintManagerEviction', 'NodeNotReady', 'Killing'];
/** Beyond a creator's own timeouts, before its pod counts as abandoned. */
const GIVE_UP_GRACE_MS = 10_000;
/** A full list of the instance's pods this often, beside the watch (an informer's resync). */
const RESYNC_MS = 10 * 60_000;
/** The API server ends each watch after about this long; it is renewed from where it ended. */
const WATCH_SECONDS = 5 * 60;
/** How long a fork's workspace copy may run: a few GB through one pod, with room to spare. */
const COPY_DEADLINE_SECONDS = 600;

/**
 * One pod per run: the gateway boots the runner over an attach to its stdin (the only time the
 * run's secret is sent), and every later connection — from this replica or any other — is
 * authenticated by the runner's challenge. With the `exec` transport a connection is an exec of
 * a small connector relaying to the runner's Unix socket, through the API server, and the run
 * needs no pod network at all; with `tcp` it goes to the pod's address, where the runner
 * listens as well, for clusters whose CNI enforces the runs' NetworkPolicy.
 *
 * Every replica holds one informer over its instance's pods: runs other replicas create,
 * claim or remove reach it as watch events, and a pod's end ends its run at once.
 */
export class KubernetesProvider implements SandboxProvider {
  readonly name = 'kubernetes';
  /** Replicas are stateless: every one serves every run, and a run outlives the replica that created it. */
  readonly capabilities: ProviderCapabilities;
  readonly kc: k8s.KubeConfig;
  /** Every request this replica makes to the API server, by kind. */
  readonly api = new ApiCounter();
  readonly sharedPool: KubernetesPool;
  private readonly core: k8s.CoreV1Api;
  private readonly ns: string;
  private readonly live = new Map<string, Live>();
  /** Set when runs get a claim of their own as workspace (`kubernetes.workspace.storageClassName`). */
  private readonly claims?: WorkspaceClaims;
  private readonly informer: PodInformer;
  private listening = false;
  /** Set when runs are agent-sandbox claims (`kubernetes.agentSandbox`). */
  private readonly agentSandbox?: AgentSandboxRuns;
  /** Paused runs' records on their kept claims, where runs can be paused: every replica reads them. */
  readonly pausedRecords?: PausedOnClaims;
  /** Copies a workspace claim into forks' claims, where runs get claims. */
  private readonly copier?: WorkspaceCopier;

  constructor(private readonly config: GatewayConfig) {
    this.kc = loadKubeConfig(config.kubernetes.kubeconfig);
    this.core = this.kc.makeApiClient(k8s.CoreV1Api);
    this.api.intercept(this.core);
    this.ns = config.kubernetes.namespace;
    this.capabilities = {
      sharedState: true,
      keepsRunsOnShutdown: true,
      // Over an exec'd carrier into the pod (egressCarrier.ts): pods need no route to anything.
      egress: { carried: true },
      templateImages: new KubernetesTemplateImages(config.kubernetes.templates),
      // Only a claim outlives its pod: an emptyDir goes with it, so such runs cannot be paused.
      ...(config.kubernetes.workspace.storageClassName
        ? { pauseDepths: ['portable'] as const }
        : {
            noPauseReason:
              'its workspace is an emptyDir, which goes with its pod (set kubernetes.workspace.storageClassName to keep workspaces on claims)',
          }),
      // With agent-sandbox the warm pool is its SandboxWarmPool.
      pool: config.kubernetes.agentSandbox ? 'none' : 'shared',
      usageFromRunner: true,
    };
    if (config.kubernetes.agentSandbox) {
      const custom = this.kc.makeApiClient(k8s.CustomObjectsApi);
      this.api.intercept(custom);
      this.agentSandbox = new AgentSandboxRuns({
        custom,
        ns: this.ns,
        instance: config.instance,
        warm: config.pool.size,
        pod: () =>
          runPod({ runId: 'agent-sandbox', tenant: '', labels: {}, limits: this.claimLimits }, this.podOptions()),
        bindTimeoutMs: config.runs.startTimeoutSeconds * 1000,
      });
    }
    const storage = config.kubernetes.workspace;
    const selector = `${LABELS.managed}=true,${LABELS.instance}=${config.instance}`;
    if (storage.storageClassName) {
      this.claims = new WorkspaceClaims(this.core, this.ns, storage);
      this.pausedRecords = new PausedOnClaims(this.core, this.ns, this.claims, selector);
      this.copier = new WorkspaceCopier(this.core, {
        namespace: this.ns,
        instance: config.instance,
        ...this.user,
        runtimeClassName: config.kubernetes.runtimeClassName,
        deadlineSeconds: COPY_DEADLINE_SECONDS,
      });
    }
    this.informer = new PodInformer(
      this.kc,
      this.core,
      this.ns,
      selector,
      { resyncMs: RESYNC_MS, watchSeconds: WATCH_SECONDS },
      this.api,
    );
    this.sharedPool = new KubernetesPool({
      kc: this.kc,
      core: this.core,
      ns: this.ns,
      instance: config.instance,
      informer: this.informer,
      counter: this.api,
      startTimeoutMs: config.runs.startTimeoutSeconds * 1000,
      ready: () => this.ready(),
      create: (spec) => this.create(spec),
      attach: (pod) => this.attachBooted(pod),
      remove: (id) => this.remove(id),
      release: (id) => this.release(id),
      claimed: (id, runId) => this.claimed(id, runId),
    });
  }

  private get user(): { uid: number; gid: number } {
    const [u, g] = this.config.kubernetes.user.split(':');
    const uid = Number(u);
    const gid = Number(g ?? u);
    return { uid: Number.isInteger(uid) && uid > 0 ? uid : 1000, gid: Number.isInteger(gid) && gid > 0 ? gid : 1000 };
  }

  /** The informer's first list is in, and its events reach the runs this replica holds. */
  private async ready(): Promise<void> {
    if (!this.listening) {
      this.listening = true;
      this.informer.on((change, pod) => this.podChanged(change, pod));
      // The warm pool fills from the gateway's start, not from its first run.
      void this.agentSandbox
        ?.ensure()
        .catch((err: Error) =>
          logger.error({ err: err.message }, 'could not set up the agent-sandbox template and pool'),
        );
    }
    await this.informer.start();
  }

  async create(spec: SandboxSpec): Promise<Sandbox> {
    if (spec.hostWorkspace) throw new Error('a host workspace cannot be mounted into a pod (the kubernetes provider)');
    const image = spec.image || this.config.kubernetes.image || resolveImage(this.config);
    if (!image) throw new Error('no runner image configured: set kubernetes.image (TETHER_K8S_IMAGE)');
    await this.ready();
    if (this.agentSandbox && this.claimable(spec)) return this.createClaimed(spec);
    const pod = runPod(spec, {
      ...this.podOptions(image),
      workspaceClaim: this.claims ? (spec.keptWorkspace ?? claimName(podName(spec.runId))) : undefined,
    });
    const kept = spec.keptWorkspace;
    if (kept && !this.claims) throw new Error('a kept workspace needs kubernetes.workspace.storageClassName');
    const name = pod.metadata!.name!;
    let created: k8s.V1Pod;
    try {
      created = (await this.core.createNamespacedPod(this.ns, pod)).body;
    } catch (err) {
      if (statusOf(err) === 409 && kept)
        throw new SandboxExistsError(`pod ${name} exists already: another replica is resuming the run`);
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
      if (spec.egress) this.carry(name, path.join(spec.egress.socketDir, EGRESS_SOCKET));
      // Other replicas connect without probing for the socket from now on; the run does not wait for it.
      void this.annotate(name, { [BOOTED_ANNOTATION]: new Date().toISOString() }).catch((err: Error) =>
        logger.warn({ pod: name, err: err.message }, 'could not mark the pod booted'),
      );
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

  private podOptions(image = this.config.kubernetes.image || resolveImage(this.config)): PodOptions {
    return {
      namespace: this.ns,
      image,
      ...this.user,
      runtimeClassName: this.config.kubernetes.runtimeClassName,
      ephemeralOverheadMb: this.config.kubernetes.ephemeralOverheadMb,
      cpuRequestPercent: this.config.kubernetes.cpuRequestPercent,
      runnerPort: this.tcpPort,
    };
  }

  /** The limits of the agent-sandbox template's pods: the default ones. */
  private get claimLimits(): SandboxSpec['limits'] {
    return defaultLimits(this.config);
  }

  /** Whether a run's pod can be the agent-sandbox template's: default limits, the runner image, nothing else. */
  private claimable(spec: SandboxSpec): boolean {
    return (
      !spec.image &&
      !spec.egress &&
      !spec.keptWorkspace &&
      !this.claims &&
      !this.tcpPort &&
      (['memoryMb', 'cpuMillis', 'pids', 'diskMb'] as const).every((k) => spec.limits[k] === this.claimLimits[k])
    );
  }

  /**
   * A run whose pod agent-sandbox provides: a claim against its warm pool, then the pod marked
   * as the run's (the labels every replica finds runs by, its boot id), its runner booted with
   * the run's secret. From then on it is a run pod like any other, except that its end is the
   * claim's deletion.
   */
  private async createClaimed(spec: SandboxSpec): Promise<Sandbox> {
    const { claim, pod: name } = await this.agentSandbox!.claim(podName(spec.runId), selectorLabels(spec.labels));
    try {
      await this.patchMetadata(name, {
        labels: selectorLabels(spec.labels),
        annotations: {
          [LABELS_ANNOTATION]: JSON.stringify(spec.labels),
          [BOOT_ID_ANNOTATION]: spec.runId,
          [SANDBOX_CLAIM_ANNOTATION]: claim,
        },
      });
      const sandbox = this.sandbox(name, spec.runId, await runSecret(this.config.stateDir, spec.runId));
      await this.waitRunning(name, this.config.runs.startTimeoutSeconds * 1000);
      await this.boot(name, sandbox.secret);
      void this.annotate(name, { [BOOTED_ANNOTATION]: new Date().toISOString() }).catch((err: Error) =>
        logger.warn({ pod: name, err: err.message }, 'could not mark the pod booted'),
      );
      return sandbox;
    } catch (err) {
      this.release(name);
      await this.agentSandbox!.release(claim);
      throw err;
    }
  }

  /** A merge patch of the pod's annotations. */
  private annotate(name: string, annotations: Record<string, string | null>): Promise<void> {
    return this.patchMetadata(name, { annotations });
  }

  /** A merge patch of the pod's labels and annotations. */
  private async patchMetadata(
    name: string,
    metadata: { labels?: Record<string, string>; annotations?: Record<string, string | null> },
  ): Promise<void> {
    await mergePatchPodMetadata(this.core, this.ns, name, metadata);
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
    this.api.count('attach');
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

  /** Until the pod runs, as the informer sees it; fails at once where Kubernetes already says it never will. */
  private waitRunning(name: string, timeoutMs: number): Promise<k8s.V1Pod> {
    let seen = false;
    return this.informer.until(
      name,
      (pod) => {
        if (!pod) {
          if (seen) throw new Error('the pod was deleted before it ran');
          return undefined;
        }
        seen = true;
        const ended = podExit(pod);
        if (ended) throw new Error(`the pod ended before it ran: ${ended.reason}`);
        const never = startFailure(pod);
        if (never) throw new Error(`the pod cannot start: ${never}`);
        const running = pod.status?.containerStatuses?.find((c) => c.name === CONTAINER)?.state?.running;
        return pod.status?.phase === 'Running' && running ? pod : undefined;
      },
      timeoutMs,
      (pod) => {
        const why = pod?.status?.conditions?.find((c) => c.status !== 'True' && c.message)?.message;
        return new Error(`pod ${name} did not start within ${timeoutMs} ms${why ? `: ${why}` : ''}`);
      },
    );
  }

  /** Polls (by exec) until the runner's socket exists in the pod. */
  private async waitSocket(name: string, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const probe = await this.exec(name, ['test', '-S', SOCKET_PATH]);
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
    const stream = await this.exec(target.pod, ['node', '-e', CONNECTOR, SOCKET_PATH]);
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
    const stream = await this.exec(name, command);
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
    const stream = await this.exec(name, ['tar', '-c', '-f', '-', '-C', dir, '--', base]);
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
    await this.ready();
    const pod = this.informer.get(id) ?? (await this.core.readNamespacedPod(id, this.ns)).body;
    const ended = podExit(pod);
    if (ended) throw new Error(`pod ${id} has ended: ${ended.reason}`);
    const secretOf = bootId(pod);
    if (!secretOf) throw new Error(`pod ${id} names no run`);
    // A pod another replica is still starting: wait until it runs and that replica has booted
    // its runner, so that a failed first connection is never taken for a dead run.
    const timeoutMs = this.config.runs.startTimeoutSeconds * 1000;
    const running = await this.waitRunning(id, timeoutMs);
    if (!running.metadata?.annotations?.[BOOTED_ANNOTATION]) await this.waitSocket(id, timeoutMs);
    return this.attachBooted(this.informer.get(id) ?? running);
  }

  /** A sandbox for a pod whose runner is booted: nothing to wait for. */
  private async attachBooted(pod: k8s.V1Pod): Promise<Sandbox> {
    const id = pod.metadata!.name!;
    const runId = runLabels(pod)[LABELS.runId] ?? bootId(pod);
    const sandbox = this.sandbox(id, runId, await runSecret(this.config.stateDir, bootId(pod)));
    // The replica taking the run up has opened the run's proxy (RunRecovery) in the same place.
    if (hasEgress(pod)) this.carry(id, path.join(egressSocketDir(this.config.stateDir, runId), EGRESS_SOCKET));
    const port = this.tcpPort;
    if (!port) return sandbox;
    const address = podAddress(pod);
    if (!address) {
      this.release(id);
      throw new Error(noAddressReason(pod));
    }
    return overTcp(sandbox, { host: address, port });
  }

  /** A pooled pod this replica holds is now run `runId`'s. */
  private claimed(id: string, runId: string): void {
    const entry = this.live.get(id);
    if (entry) entry.runId = runId;
  }

  /**
   * How long after a pod's creation its creator has given up on it: the start and the boot
   * each timed out, and the workspace claim's bind where runs get one.
   */
  private get giveUpMs(): number {
    const { runs, kubernetes } = this.config;
    const bind = this.claims ? kubernetes.workspace.bindTimeoutSeconds : 0;
    return (bind + 2 * runs.startTimeoutSeconds) * 1000 + GIVE_UP_GRACE_MS;
  }

  /** A pod cannot be stopped and kept: stopping a run deletes its pod. */
  async stop(id: string): Promise<void> {
    await this.remove(id);
  }

  async remove(id: string): Promise<void> {
    // agent-sandbox would start the pod of a live claim again: the claim goes first.
    const claim = this.informer.get(id)?.metadata?.annotations?.[SANDBOX_CLAIM_ANNOTATION];
    if (claim) await this.agentSandbox?.release(claim);
    await this.deletePod(id);
    // Its owner reference would have the garbage collector do it too; the run's end should not wait for that.
    await this.claims?.delete(claimName(id));
  }

  private async deletePod(id: string): Promise<void> {
    this.release(id);
    try {
      await this.core.deleteNamespacedPod(id, this.ns, undefined, undefined, 0);
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
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
        if (statusOf(err) === 404) return claim;
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

  /**
   * Forks' workspaces: a claim each, kept from the start, bound where the copier runs (on the
   * node of the workspace copied into them). All or none.
   */
  async newWorkspaces(specs: SandboxSpec[]): Promise<string[]> {
    if (!this.claims) throw new Error('a run on an emptyDir workspace cannot be forked: its files go with its pod');
    const made: string[] = [];
    try {
      for (const spec of specs) {
        const name = claimName(podName(spec.runId));
        await this.claims.createKept(name, selectorLabels(spec.labels), spec.limits.diskMb ?? 0);
        made.push(name);
      }
    } catch (err) {
      for (const name of made) await this.claims.delete(name).catch(() => undefined);
      throw err;
    }
    return made;
  }

  /** By one copier pod of the run's image, as the run's user, mounting every claim. */
  async copyWorkspace(from: string, into: string[], image?: string): Promise<void> {
    if (!this.claims || !this.copier) throw new Error('a run on an emptyDir workspace cannot be copied');
    if (into.length === 0) return;
    try {
      await this.core.readNamespacedPersistentVolumeClaim(from, this.ns);
    } catch (err) {
      if (statusOf(err) === 404) throw new Error(`the run's workspace (claim ${from}) is gone`);
      throw err;
    }
    const copierImage = image || this.config.kubernetes.image || resolveImage(this.config);
    if (!copierImage) throw new Error('no runner image configured: set kubernetes.image (TETHER_K8S_IMAGE)');
    await this.copier.copy(`${into[0].replace(/-workspace$/, '')}-copy`, from, into, copierImage);
  }

  /** Workspace claims whose pod is gone, except those paused runs keep. */
  async sweep(labels: Record<string, string>, kept?: ReadonlySet<string>): Promise<number> {
    const selector = Object.entries(labels)
      .map(([k, v]) => `${k}=${v}`)
      .join(',');
    let removed = 0;
    if (this.agentSandbox) {
      // Sandbox claims no run pod names: their replica died between the claim and marking the pod.
      const served = new Set(this.informer.list().map((p) => p.metadata?.annotations?.[SANDBOX_CLAIM_ANNOTATION]));
      removed += await this.agentSandbox.sweep(selector, served, this.config.runs.startTimeoutSeconds * 1000);
    }
    if (this.claims) removed += await this.claims.sweep(selector, kept);
    if (this.copier) removed += await this.copier.sweep();
    return removed;
  }

  /** From the informer's picture: the instance's pods are all in it. */
  async list(labels: Record<string, string>): Promise<SandboxInfo[]> {
    await this.ready();
    return this.informer
      .list()
      .filter((pod) => Object.entries(labels).every(([k, v]) => pod.metadata?.labels?.[k] === v))
      .map((pod) => infoOf(pod, this.giveUpMs));
  }

  /** Every change to the instance's pods, the ones there now first (as `added`). */
  async watch(listener: (change: SandboxChange) => void): Promise<void> {
    await this.ready();
    this.informer.on((change, pod) => listener({ change, info: infoOf(pod, this.giveUpMs) }));
    for (const pod of this.informer.list()) listener({ change: 'added', info: infoOf(pod, this.giveUpMs) });
  }

  /**
   * A pod this replica holds changed: deleted, evicted, OOM-killed or failed ends its run at
   * once, with Kubernetes' reason. A resync that no longer lists it counts as deleted.
   */
  private podChanged(change: 'added' | 'changed' | 'removed', pod: k8s.V1Pod): void {
    const name = pod?.metadata?.name;
    const entry = name ? this.live.get(name) : undefined;
    if (!name || !entry) return;
    if (change === 'removed') {
      this.ended(name, podExit(pod) ?? { reason: 'the pod was deleted', oomKilled: false, exitCode: null });
      return;
    }
    const exit = podExit(pod);
    if (!exit) return;
    // The container's end is often reported before the pod's own status says why (an
    // eviction): a moment's wait for the final phase gets Kubernetes' reason.
    const final =
      pod.status?.phase === 'Failed' || pod.status?.phase === 'Succeeded' || !!pod.metadata?.deletionTimestamp;
    if (final) {
      this.ended(name, exit);
      return;
    }
    entry.provisional ??= setTimeout(() => this.ended(name, exit), FINAL_STATUS_WAIT_MS);
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
      entry.carrier?.close();
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

  backendRequests(): Record<string, number> {
    return this.api.snapshot();
  }

  forget(id: string): void {
    this.release(id);
  }

  /** Lets go of a pod without touching it: its streams close, its exit is never reported. */
  private release(name: string): void {
    const entry = this.live.get(name);
    if (!entry) return;
    this.live.delete(name);
    clearTimeout(entry.provisional);
    entry.carrier?.close();
    for (const s of entry.streams) s.close();
  }

  /**
   * Carries the run's egress from its pod to this gateway's proxy of the run. Every replica
   * holding the run carries; in the pod one carrier at a time serves, and another takes over
   * within a second when its replica goes.
   */
  private carry(name: string, proxySocket: string): void {
    const entry = this.live.get(name);
    if (!entry || entry.carrier) return;
    entry.carrier = new EgressCarrier({
      runId: entry.runId,
      proxySocket,
      open: () => this.exec(name, ['node', CARRIER_SCRIPT, `${EGRESS_MOUNT}/${EGRESS_SOCKET}`]),
    });
    entry.carrier.start();
  }

  private exec(name: string, command: string[]): Promise<PodStream> {
    this.api.count('exec');
    return openExec(this.kc, { namespace: this.ns, pod: name, container: CONTAINER }, command);
  }

  async close(): Promise<void> {
    await this.sharedPool.close();
    for (const name of [...this.live.keys()]) this.release(name);
    this.informer.stop();
  }
}

/**
 * What the gateway reads of a pod: its run labels, whether it lives, whether its runner is
 * booted, and when the replica starting it will have given up (`giveUpMs` after its creation).
 */
function infoOf(pod: k8s.V1Pod, giveUpMs: number): SandboxInfo {
  const running = pod.status?.containerStatuses?.find((c) => c.name === CONTAINER)?.state?.running;
  const claim = pod.metadata?.annotations?.[CLAIM_ANNOTATION];
  let claimedAt: number | undefined;
  if (claim) {
    try {
      claimedAt = Date.parse((JSON.parse(claim) as { at?: string }).at ?? '') || undefined;
    } catch {
      claimedAt = undefined;
    }
  }
  const pooled = pod.metadata?.labels?.[POOL_STATE_LABEL];
  return {
    id: pod.metadata!.name!,
    labels: runLabels(pod),
    // A pod still being started (by another replica) counts as running: it is not an orphan.
    running: !podExit(pod),
    ready:
      !podExit(pod) &&
      pod.status?.phase === 'Running' &&
      !!running &&
      !!pod.metadata?.annotations?.[BOOTED_ANNOTATION] &&
      (pooled === undefined || pooled === 'claimed'),
    ...(claimedAt ? { claimedAt } : {}),
    giveUpAt: new Date(pod.metadata?.creationTimestamp ?? Date.now()).getTime() + giveUpMs,
  };
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
