import type { Readable, Writable } from 'node:stream';
import type { ResourceLimits } from '../config';
import type { EgressCapability, EgressGrant } from '../egress/service';
import type { TemplateImageSource } from './templateImages';

/** Labels every sandbox carries, so a restarted gateway can find its runs again. */
export const LABELS = {
  managed: 'dev.tether.managed',
  instance: 'dev.tether.instance',
  runId: 'dev.tether.run-id',
  tenant: 'dev.tether.tenant',
  version: 'dev.tether.version',
  conversation: 'dev.tether.conversation',
  spec: 'dev.tether.spec',
  /** On a pooled sandbox: its class. Its run, once claimed, is in the gateway's claim records. */
  pool: 'dev.tether.pool',
} as const;

export interface SandboxSpec {
  runId: string;
  tenant: string;
  labels: Record<string, string>;
  /** A host directory to use as the workspace; absent means the provider creates one. */
  hostWorkspace?: string;
  limits: ResourceLimits;
  /** A template's image instead of the runner image. */
  image?: string;
  /** The run's way out through the gateway's egress proxy; absent: no network at all. */
  egress?: EgressGrant;
  /** A workspace `park` kept (the provider's handle): the sandbox is made on it, not on a new one. */
  keptWorkspace?: string;
}

/**
 * How deep a pause keeps a run. `portable`: what of the run is data, written by the runner into
 * its workspace, which the provider keeps while the sandbox is removed. `memory`: the whole
 * sandbox, every process with its memory, checkpointed and stopped (`MemoryCheckpoints`).
 */
export type PauseDepth = 'portable' | 'memory';

/**
 * Memory checkpoints of a sandbox, where the provider can take them (`pauseDepths` lists
 * `memory`). The runner is quiesced first (no socket connection, no listener: `runner/quiesce`);
 * the sandbox keeps its workspace throughout.
 */
export interface MemoryCheckpoints {
  /** Why this sandbox cannot be checkpointed, where that is known before its runner is quiesced. */
  refusal?(id: string): string | undefined;
  /**
   * Checkpoints the sandbox and stops it: no process of it is left. Resolves with the
   * checkpoint's name once it is written whole; a checkpoint that failed leaves the sandbox
   * running, its runner still quiesced (`wake`).
   */
  checkpoint(id: string): Promise<string>;
  /** Starts the sandbox from its checkpoint and wakes its runner; the sandbox, once its socket is back. */
  restore(id: string, checkpoint: string): Promise<Sandbox>;
  /** Has a quiesced runner of a running sandbox listen again (a checkpoint that failed); its sandbox. */
  wake(id: string): Promise<Sandbox>;
  /** Removes a checkpoint the run no longer needs (a resume came through). */
  drop(id: string, checkpoint: string): Promise<void>;
  /** Bytes a checkpoint holds on the host, where this side can see them (undefined: it cannot). */
  sizeOf?(id: string, checkpoint: string): Promise<number | undefined>;
  /**
   * For memory forks, where the provider can make them: checkpoints the sandbox and leaves it
   * running, its runner still quiesced (`wake`). Resolves with the checkpoint's name.
   */
  snapshot?(id: string): Promise<string>;
  /**
   * New sandboxes started from checkpoint `checkpoint` of sandbox `id`, one per spec, each on its
   * `keptWorkspace`, their runners listening again and still bound to the run they were copied
   * from. What does not need the workspaces' files is done at once; the sandboxes start once
   * `copied` (the copy of the workspace made while the runner was quiesced) resolves, and none
   * does when it rejects. Each settles on its own; a failed one leaves only its workspace behind.
   * The checkpoint is used up, unless `keep`: then it stays whole with its sandbox, for more
   * copies later (a template's snapshot, paused at memory depth, is forked this way).
   */
  copies?(
    id: string,
    checkpoint: string,
    specs: SandboxSpec[],
    copied: Promise<void>,
    keep?: boolean,
  ): Promise<PromiseSettledResult<Sandbox>[]>;
}

/** Why a sandbox ended, as a person would want to read it. */
export interface SandboxExit {
  reason: string;
  oomKilled: boolean;
  exitCode: number | null;
  /** What the sandbox said about an OOM kill beyond the fact: which process, at which limit. */
  detail?: string;
}

/** One live sandbox: the ways to its runner and the workspace's files. */
export interface Sandbox {
  readonly id: string;
  readonly runId: string;
  /** The workspace path as the runner sees it. */
  readonly workspacePath: string;
  /** The provider's handle on a workspace this sandbox owns, the one `park` would keep. */
  readonly keepable?: string;
  /** The run's secret: every socket connection to the runner proves it holds it. */
  readonly secret: Buffer;
  /** Where the gateway reaches the runner's socket, when it has one. */
  readonly socket?: { path: string } | { host: string; port: number };
  /** Why there is no socket, for the log. */
  readonly noSocketReason?: string;
  /**
   * The socket is the only way to the runner (Kubernetes over TCP; a re-attached run whose
   * socket was used before): a failed connection is an error, never a fall back to stdio, and a
   * dropped one is opened again.
   */
  readonly socketOnly?: boolean;
  /**
   * Opens a new byte stream to the runner's socket, where the provider relays one (Kubernetes:
   * an exec into the pod). The connection passes the same challenge as a socket's.
   */
  dial?(): Promise<RunnerStream>;
  /** The runner's stdio (attached on first use where the provider must attach). */
  stdio(): Promise<{ stdin: Writable; stdout: Readable }>;
  /** Resolves once, when the sandbox's runner is gone. */
  readonly exited: Promise<SandboxExit>;
  /** Unpacks a tar stream into the workspace at a workspace-relative directory. */
  putArchive(relDir: string, tar: Readable): Promise<void>;
  /** A tar stream of a workspace-relative path. */
  getArchive(relPath: string): Promise<Readable>;
  /** Its memory and CPU use now, when the provider can report them (read at metrics scrape time). */
  usage?(): Promise<SandboxUsage>;
}

/**
 * The provider made the sandbox but this deployment cannot serve a run from it (a transport the
 * cluster's network cannot carry). The provider has removed what it made; the run is refused
 * as a failed precondition, not left behind as a failed run.
 */
export class SandboxPreconditionError extends Error {}

/**
 * The sandbox is alive but this gateway cannot prove itself to its runner (it was started with
 * another state directory, whose transport key the runner knows). Not the run's end: the
 * sandbox is left as it is for the gateway that can reach it.
 */
export class SandboxUnreachableError extends Error {}

/**
 * What provides sandboxes cannot be reached now (a Docker engine stopped or restarting). Live
 * sandboxes go on without it; what needs it now (a create, a file transfer) fails, and a later
 * try may succeed.
 */
export class SandboxBackendUnavailableError extends Error {}

/**
 * The run's sandbox exists already: where replicas share sandboxes, another replica made it
 * at the same moment (two resumes of one paused run). Nothing was made; that replica's
 * sandbox is the run's.
 */
export class SandboxExistsError extends Error {}

/** A byte stream to a runner's socket that the gateway did not open itself. */
export interface RunnerStream {
  readable: Readable;
  writable: Writable;
  close(): void;
}

/** What a sandbox uses now: for billing and warnings, not for enforcement. */
export interface SandboxUsage {
  /** Bytes its writable places hold on the host's disk (0 when the provider cannot tell). */
  diskBytes: number;
  /** Memory its processes hold now, page cache excluded. */
  memoryBytes: number;
  /** CPU time its processes have used since it started, in milliseconds. */
  cpuMillis: number;
}

export interface SandboxInfo {
  id: string;
  labels: Record<string, string>;
  running: boolean;
  /**
   * Its runner has been booted and can be connected to at once (`attach` waits for nothing).
   * Told by providers whose sandboxes another replica may be starting (`sharedState`).
   */
  ready?: boolean;
  /** A sandbox claimed from a shared pool: when the claim was made (ms since the epoch). */
  claimedAt?: number;
  /**
   * Not `ready` yet: when the replica starting it will have given up (its start and boot timed
   * out; ms since the epoch). Not ready after that, it was left by a replica that died.
   */
  giveUpAt?: number;
}

/** A change to a sandbox of this instance, whoever made it: for replicas that share their sandboxes. */
export interface SandboxChange {
  change: 'added' | 'changed' | 'removed';
  info: SandboxInfo;
}

/**
 * What a provider declares about itself. The gateway decides by these, never by the
 * provider's name.
 */
export interface ProviderCapabilities {
  /**
   * Other gateway replicas serve the same sandboxes (Kubernetes): runs one of them creates are
   * found by the others, and none may treat a run as its own alone.
   */
  readonly sharedState: boolean;
  /** Runs outlive a gateway shutdown unless the caller asks otherwise (the next gateway recovers them). */
  readonly keepsRunsOnShutdown: boolean;
  readonly egress: EgressCapability;
  /** Where runs of a template find its image; absent: the provider runs no templates. */
  readonly templateImages?: TemplateImageSource;
  /**
   * The depths at which its runs can be paused (`park` and `keptWorkspace` for `portable`,
   * `SandboxProvider.memory` for `memory`); absent: none. May grow once the provider has asked
   * its backend (docker: whether the engine takes checkpoints with this runtime).
   */
  readonly pauseDepths?: readonly PauseDepth[];
  /** Why its runs cannot be paused, where `pauseDepths` is absent and there is more to say than that. */
  readonly noPauseReason?: string;
  /**
   * Where the warm pool lives. `local`: this gateway starts pooled sandboxes and keeps its
   * claims in its state directory. `shared`: the provider's backend holds the pool
   * (`sharedPool`), and every replica claims from it. `none`: runs always start cold.
   */
  readonly pool: 'local' | 'shared' | 'none';
  /**
   * Its runs' usage (GetRun, metrics) is read by the runner from its own cgroup, over the
   * connection the gateway holds: the provider has no cheaper way to it (Kubernetes: the
   * kubelet's figures need node access, and an exec per read would load the API server).
   */
  readonly usageFromRunner?: boolean;
}

/**
 * Where runs live. Nothing above this interface knows which provider it talks to: the
 * gateway asks for a sandbox, talks JSON-RPC on its stdio, and moves tar streams.
 */
export interface SandboxProvider {
  readonly name: string;
  /** What this provider can do, so that nothing above it has to know it by name. */
  readonly capabilities: ProviderCapabilities;
  create(spec: SandboxSpec): Promise<Sandbox>;
  /**
   * Re-attaches to a sandbox that outlived a gateway restart. Throws SandboxUnreachableError
   * for a live sandbox this gateway cannot reach.
   */
  attach(id: string): Promise<Sandbox>;
  stop(id: string): Promise<void>;
  /** Removes the sandbox and the workspace it created. */
  remove(id: string): Promise<void>;
  /**
   * Removes the sandbox and keeps its workspace, for a portable pause; returns the handle a
   * later `create` takes as `keptWorkspace`. Where `pauseDepths` is declared.
   */
  park?(id: string): Promise<string>;
  /** Removes a workspace `park` kept (a paused run deleted or expired). */
  dropWorkspace?(handle: string): Promise<void>;
  /**
   * New, empty workspaces for forks' runs, one per spec, all or none: their handles, in order,
   * for `copyWorkspace` and then `keptWorkspace`. Made apart from the copy so that they can be
   * made while the source is still being readied.
   */
  newWorkspaces?(specs: SandboxSpec[]): Promise<string[]>;
  /**
   * Copies the files of workspace `from` (a live sandbox's `keepable`, or a kept one) into each
   * of `into` (made by `newWorkspaces`), with the run's `image` where the copy runs in one.
   * Rejects when any copy failed; the workspaces stay the caller's to drop.
   */
  copyWorkspace?(from: string, into: string[], image?: string): Promise<void>;
  /** Memory checkpoints, where `pauseDepths` lists `memory`. */
  readonly memory?: MemoryCheckpoints;
  list(labels: Record<string, string>): Promise<SandboxInfo[]>;
  /**
   * Removes what sandboxes with these labels left behind without a sandbox (a workspace
   * created just before a crash). Called on start-up, before any run is created. The
   * workspaces of paused runs (`kept`, by handle) are not leftovers.
   */
  sweep?(labels: Record<string, string>, kept?: ReadonlySet<string>): Promise<number>;
  usage?(id: string): Promise<SandboxUsage>;
  /** Requests made to the provider's backend since start, by kind, where it has one it should not overload (an API server). */
  backendRequests?(): Record<string, number>;
  /**
   * Where `sharedState`: every change to this instance's sandboxes (including the ones there
   * now, as `added`), as the backend reports it. Resolves once the first picture is in.
   */
  watch?(listener: (change: SandboxChange) => void): Promise<void>;
  /** Lets go of a sandbox `attach` returned without touching it (another replica's to serve or remove). */
  forget?(id: string): void;
  /** Where `pool` is `shared`: the pool every replica claims from. */
  readonly sharedPool?: SharedSandboxPool;
  /**
   * Where `sharedState` and runs can be paused: paused runs' records, kept where every replica
   * finds them, so that any replica lists and resumes any paused run. Absent: they are kept in
   * the gateway's state directory.
   */
  readonly pausedRecords?: SharedRunRecords;
  close(): Promise<void>;
}

/**
 * Small records kept in the provider's backend beside a run's kept workspace, where every
 * replica reads them (Kubernetes: on the workspace's claim). By run id; what a record holds is
 * its caller's to check.
 */
export interface SharedRunRecords {
  /** Writes the run's record onto `workspace` (a handle `keepable` or `park` gave), replacing any. */
  write(runId: string, workspace: string, record: unknown): Promise<void>;
  /** The run's record, or undefined when it has none. */
  read(runId: string): Promise<unknown>;
  remove(runId: string): Promise<void>;
  /** The runs that have a record. */
  list(): Promise<string[]>;
}

/** One class of a shared pool: its key (`classKey`), what it is made of, and how many are kept idle. */
export interface SharedPoolClass {
  key: string;
  limits: ResourceLimits;
  image?: string;
  size: number;
}

export interface SharedPoolOptions<L> {
  classes: SharedPoolClass[];
  /** Idle and starting pooled sandboxes at most, over all classes. */
  maxTotal: number;
  /** Their memory limits summed may not pass this (MiB). */
  maxMemoryMb: number;
  /** Sandboxes started for the pool at once (by the one replica that fills it). */
  concurrency: number;
  /** Labels every pooled sandbox carries (managed, instance). */
  labels: Record<string, string>;
  /** Readies a new pooled sandbox's runner for any run, before it is offered. */
  prepare(sandbox: Sandbox): Promise<void>;
  /** Opens this replica's connection to an idle pooled sandbox's runner, ahead of a claim. */
  link(sandbox: Sandbox): Promise<L>;
  /** Lets go of a connection `link` opened (the sandbox was claimed elsewhere, or is gone). */
  unlink(link: L): void;
}

/** What a claim from a shared pool hands over: the sandbox, already the run's, and this replica's open link to it. */
export interface SharedClaim<L> {
  sandbox: Sandbox;
  link: L;
}

export interface SharedPoolClassStats {
  key: string;
  target: number;
  idle: number;
  starting: number;
  /** Idle ones this replica holds a connection to (can claim at once). */
  linked: number;
}

/**
 * A warm pool kept in the provider's backend (a cluster), shared by every gateway replica:
 * one replica at a time refills it; any replica claims from it, and a claim is one atomic
 * operation there, so no sandbox is ever claimed twice.
 */
export interface SharedSandboxPool {
  start<L>(opts: SharedPoolOptions<L>): Promise<void>;
  /**
   * An idle sandbox of class `key`, made the run's (its labels `labels`) by an atomic claim;
   * undefined when none this replica is linked to could be claimed.
   */
  claim<L>(
    key: string,
    run: { runId: string; tenant: string; labels: Record<string, string> },
  ): Promise<SharedClaim<L> | undefined>;
  stats(): SharedPoolClassStats[];
  /** Stops refilling and lets go of its links; the pooled sandboxes stay for the other replicas. */
  close(): Promise<void>;
}
