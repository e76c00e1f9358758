import { PassThrough, Readable } from 'node:stream';
import {
  createMessageConnection,
  StreamMessageReader,
  StreamMessageWriter,
  type MessageConnection,
} from 'vscode-jsonrpc/node';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { CreateRunRequestSchema } from '@tether/contract';
import { defaultConfig, type GatewayConfig } from '../../../gateway/src/config';
import { specFromRequest } from '../../../gateway/src/grpc/convert';
import type { RunSpec } from '../../../gateway/src/runs/RunRecord';
import type {
  MemoryCheckpoints,
  ProviderCapabilities,
  Sandbox,
  SandboxExit,
  SandboxInfo,
  SandboxProvider,
  SandboxSpec,
} from '../../../gateway/src/sandbox/provider';
import {
  BindRequest,
  type CommandParams,
  CommandRequest,
  InitializeRequest,
  PrepareRequest,
  ShutdownRequest,
} from '../../../protocol/src/run';
import { PingRequest, QuiesceRequest } from '../../../protocol/src/transport';
import type { ToolDescriptor } from '../../../protocol/src/tools';

export const TOOLS: ToolDescriptor[] = [
  { name: 'echo', description: 'echoes', tier: 'read', inputSchema: { type: 'object' }, parallelSafe: true },
  { name: 'write', description: 'writes', tier: 'write', inputSchema: { type: 'object' }, parallelSafe: false },
];

/** How the fake runner answers; set per test. Runs once per connection (create and attach). */
export type RunnerScript = (conn: MessageConnection, sandbox: FakeSandbox) => void;

/** Binds as a runner does: once, to one run, or to a fork of the run it is bound to. */
const bind = (sb: FakeSandbox, p: { runId: string; forkOf?: string }) => {
  if (sb.boundTo !== undefined && sb.boundTo !== p.runId) {
    if (p.forkOf === undefined || p.forkOf !== sb.boundTo)
      throw new Error(`runner belongs to run ${sb.boundTo}, not ${p.runId}`);
  }
  sb.boundTo = p.runId;
  return { version: 'fake', tools: TOOLS };
};

export const answersInitialize: RunnerScript = (conn, sb) => {
  conn.onRequest(InitializeRequest.type, (p) => bind(sb, p));
  conn.onRequest(PrepareRequest.type, () => ({ version: 'fake' }));
  conn.onRequest(BindRequest.type, (p) => bind(sb, p));
  conn.onRequest(PingRequest.type, () => ({ runId: sb.boundTo ?? null, connections: 1 }));
  conn.onRequest(ShutdownRequest.type, () => ({}));
  conn.onRequest(QuiesceRequest.type, () => {
    sb.quiesced = true;
    return { closing: 1 };
  });
};

/**
 * A sandbox whose runner is a JSON-RPC connection in this process: the gateway's real
 * RunnerClient talks to it over a pair of in-memory streams, as it would to a container's stdio.
 */
export class FakeSandbox implements Sandbox {
  stdin = new PassThrough();
  stdout = new PassThrough();
  readonly exited: Promise<SandboxExit>;
  runner!: MessageConnection;
  running = true;
  /** The run its runner was bound to (it outlives a re-attach, as a real runner's does). */
  boundTo: string | undefined;
  /** What its processes hold in memory: kept by a memory checkpoint, lost with the sandbox otherwise. */
  memory: Record<string, unknown> = {};
  /** Its runner closed its connections and listeners (`runner/quiesce`) and was not woken since. */
  quiesced = false;
  /** Where the gateway would reach its runner's socket (a fake one still talks over stdio). */
  socket?: { path: string };
  private resolveExit!: (e: SandboxExit) => void;

  constructor(
    readonly id: string,
    readonly runId: string,
    readonly labels: Record<string, string>,
    private readonly script: RunnerScript,
  ) {
    this.exited = new Promise((resolve) => (this.resolveExit = resolve));
    this.connect();
  }

  readonly workspacePath = '/workspace';
  /** Its workspace's handle, as `park` returns it. */
  keepable?: string;
  readonly secret = Buffer.alloc(32);
  readonly noSocketReason = 'a fake sandbox has stdio only';

  async stdio(): Promise<{ stdin: PassThrough; stdout: PassThrough }> {
    return { stdin: this.stdin, stdout: this.stdout };
  }

  private connect(): void {
    this.runner = createMessageConnection(new StreamMessageReader(this.stdin), new StreamMessageWriter(this.stdout));
    this.script(this.runner, this);
    this.runner.listen();
  }

  /** New stdio for a gateway that re-attaches (the old streams went with the old gateway). */
  reattach(): this {
    this.runner.dispose();
    this.stdin = new PassThrough();
    this.stdout = new PassThrough();
    this.connect();
    return this;
  }

  /** The runner process ends: its stdio closes and the exit is reported. */
  exit(exit: Partial<SandboxExit> = {}): void {
    if (!this.running) return;
    this.running = false;
    this.runner.dispose();
    this.stdout.end();
    this.resolveExit({ reason: 'exited with code 1', oomKilled: false, exitCode: 1, ...exit });
  }

  async putArchive(): Promise<void> {}

  async getArchive(): Promise<Readable> {
    return Readable.from([]);
  }
}

/**
 * A runner that also pauses: `run/suspend` writes a state into its sandbox's workspace (a map
 * in the provider, kept across `park`), `run/restore` reads it back.
 */
export const answersPause =
  (workspaces: Map<string, Record<string, unknown>>): RunnerScript =>
  (conn, sb) => {
    answersInitialize(conn, sb);
    conn.onRequest(CommandRequest.type, (p: CommandParams) => {
      const ws = workspaces.get(sb.keepable ?? '') ?? {};
      if (p.family === 'run' && p.command === 'suspend') {
        ws.state = { x: 42 };
        return { written: true, bytes: 100, limitBytes: 1000, families: [], kernels: [], notKept: [] };
      }
      if (p.family === 'run' && p.command === 'restore')
        return ws.state
          ? { outcome: 'restored', families: [], kernels: [], notKept: [], notice: 'resumed: x is back' }
          : { outcome: 'none', families: [], kernels: [], notKept: [], notice: '' };
      throw new Error(`no command ${p.family}/${p.command}`);
    });
  };

export class FakeProvider implements SandboxProvider {
  readonly name = 'fake';
  /** What a fake declares; a test may swap it for a provider that shares its sandboxes, or carries egress. */
  capabilities: ProviderCapabilities = {
    sharedState: false,
    keepsRunsOnShutdown: false,
    egress: { carried: false, reason: 'the fake provider cannot carry egress' },
    pool: 'local',
  };
  readonly sandboxes = new Map<string, FakeSandbox>();
  readonly removed: string[] = [];
  /** The image each sandbox was created from (a template's), by sandbox id. */
  readonly images = new Map<string, string | undefined>();
  private next = 0;

  constructor(public script: RunnerScript = answersInitialize) {}

  /** Kept workspaces by handle (what a paused run still has), and those dropped. */
  readonly workspaces = new Map<string, Record<string, unknown>>();
  readonly dropped: string[] = [];
  /** The kept workspace each sandbox was made on, by sandbox id. */
  readonly madeOn = new Map<string, string>();

  /** Checkpoints by sandbox: the memory each holds, by checkpoint name. */
  readonly checkpoints = new Map<string, Map<string, Record<string, unknown>>>();
  memory?: MemoryCheckpoints;

  /**
   * Declares memory pauses too: a checkpoint stops the sandbox keeping what its processes hold,
   * a restore starts it again from there. `fail` makes a checkpoint or a restore fail.
   */
  memoryPausable(
    fail: {
      checkpoint?: string;
      restore?: string;
      ends?: boolean;
      wakeEnds?: boolean;
      restoredEnds?: boolean;
      /** Memory forks: the checkpoint that leaves the sandbox running fails. */
      snapshot?: string;
      /** Memory forks: the copy at this index fails to start. */
      copy?: number;
    } = {},
  ): this {
    this.pausable();
    this.capabilities = { ...this.capabilities, pauseDepths: ['portable', 'memory'] };
    const provider = this;
    const running = (id: string) => {
      const sb = provider.sandboxes.get(id);
      if (!sb) throw new Error(`no sandbox ${id}`);
      return sb;
    };
    this.memory = {
      async checkpoint(id) {
        const sb = running(id);
        if (!sb.quiesced) throw new Error('the sandbox holds a connected host Unix socket');
        if (fail.checkpoint) {
          // Some runtimes end the sandbox with a failed checkpoint.
          if (fail.ends) sb.exit({ reason: 'ended by the failed checkpoint', exitCode: 128 });
          throw new Error(fail.checkpoint);
        }
        const name = `cp-${provider.checkpoints.get(id)?.size ?? 0}`;
        provider.checkpoints.set(
          id,
          new Map([...(provider.checkpoints.get(id) ?? []), [name, structuredClone(sb.memory)]]),
        );
        sb.exit({ reason: 'checkpointed', exitCode: 0 });
        return name;
      },
      async restore(id, name) {
        const old = running(id);
        const held = provider.checkpoints.get(id)?.get(name);
        if (!held) throw new Error(`no checkpoint ${name}`);
        if (fail.restore) throw new Error(fail.restore);
        const sb = provider.again(old);
        sb.memory = structuredClone(held);
        // Restored, and ended before its runner answered.
        if (fail.restoredEnds) sb.exit({ reason: 'ended after the restore', exitCode: 1 });
        return sb;
      },
      async wake(id) {
        const sb = running(id);
        if (!sb.running) throw new Error(`container ${id} is not running`);
        sb.quiesced = false;
        if (!fail.wakeEnds) return sb.reattach();
        // Attached anew (a new handle, as an engine's attach gives), and ended before its runner answered.
        const woken = provider.again(sb);
        woken.exit({ reason: 'ended after the wake', exitCode: 1 });
        return woken;
      },
      async drop(id, name) {
        provider.checkpoints.get(id)?.delete(name);
      },
      async snapshot(id) {
        const sb = running(id);
        if (!sb.quiesced) throw new Error('the sandbox holds a connected host Unix socket');
        if (fail.snapshot) throw new Error(fail.snapshot);
        const name = `snap-${provider.checkpoints.get(id)?.size ?? 0}`;
        provider.checkpoints.set(
          id,
          new Map([...(provider.checkpoints.get(id) ?? []), [name, structuredClone(sb.memory)]]),
        );
        return name;
      },
      async copies(id, name, specs, copied) {
        const source = running(id);
        const held = provider.checkpoints.get(id)?.get(name);
        if (!held) throw new Error(`no checkpoint ${name}`);
        provider.checkpoints.get(id)?.delete(name);
        await copied;
        return Promise.allSettled(
          specs.map(async (spec, i) => {
            if (fail.copy === i) throw new Error('the copy did not start');
            const sb = await provider.create(spec);
            sb.memory = structuredClone(held);
            // Its runner is the source's, copied: still bound to the source's run.
            sb.boundTo = source.boundTo;
            return sb;
          }),
        );
      },
    };
    return this;
  }

  /** The same sandbox started again (same id and workspace): a new runner process, new stdio. */
  private again(old: FakeSandbox): FakeSandbox {
    const sb = new FakeSandbox(old.id, old.runId, old.labels, this.script);
    sb.keepable = old.keepable;
    sb.socket = old.socket;
    sb.boundTo = old.boundTo;
    this.sandboxes.set(sb.id, sb);
    return sb;
  }

  /** Declares portable pauses, with a runner that suspends and restores. */
  pausable(): this {
    this.capabilities = { ...this.capabilities, pauseDepths: ['portable'] };
    this.script = answersPause(this.workspaces);
    return this;
  }

  async create(spec: SandboxSpec): Promise<FakeSandbox> {
    const sb = new FakeSandbox(`sb-${++this.next}`, spec.runId, spec.labels, this.script);
    sb.keepable = spec.keptWorkspace ?? `ws-${spec.runId}`;
    if (!this.workspaces.has(sb.keepable)) this.workspaces.set(sb.keepable, {});
    if (spec.keptWorkspace) this.madeOn.set(sb.id, spec.keptWorkspace);
    // A provider with memory checkpoints reconnects through the runner's socket after a restore.
    if (this.memory) sb.socket = { path: `/nonexistent/tether-fake/${sb.id}.sock` };
    this.sandboxes.set(sb.id, sb);
    this.images.set(sb.id, spec.image);
    return sb;
  }

  async attach(id: string): Promise<FakeSandbox> {
    const sb = this.sandboxes.get(id);
    if (!sb) throw new Error(`no sandbox ${id}`);
    return sb.reattach();
  }

  async stop(id: string): Promise<void> {
    this.sandboxes.get(id)?.exit({ reason: 'stopped', exitCode: 0 });
  }

  async remove(id: string): Promise<void> {
    this.sandboxes.get(id)?.exit({ reason: 'removed', exitCode: 0 });
    this.sandboxes.delete(id);
    this.removed.push(id);
  }

  async park(id: string): Promise<string> {
    const sb = this.sandboxes.get(id);
    if (!sb?.keepable) throw new Error(`no sandbox ${id}`);
    sb.exit({ reason: 'removed', exitCode: 0 });
    this.sandboxes.delete(id);
    return sb.keepable;
  }

  async newWorkspaces(specs: SandboxSpec[]): Promise<string[]> {
    return specs.map((spec) => {
      const handle = `ws-${spec.runId}`;
      this.workspaces.set(handle, {});
      return handle;
    });
  }

  async copyWorkspace(from: string, into: string[]): Promise<void> {
    const source = this.workspaces.get(from);
    if (!source) throw new Error(`no workspace ${from}`);
    for (const handle of into) this.workspaces.set(handle, structuredClone(source));
  }

  async dropWorkspace(handle: string): Promise<void> {
    this.workspaces.delete(handle);
    this.dropped.push(handle);
  }

  async list(labels: Record<string, string>): Promise<SandboxInfo[]> {
    return [...this.sandboxes.values()]
      .filter((sb) => Object.entries(labels).every(([k, v]) => sb.labels[k] === v))
      .map((sb) => ({ id: sb.id, labels: sb.labels, running: sb.running }));
  }

  async close(): Promise<void> {}
}

export function testConfig(runs: Partial<GatewayConfig['runs']> = {}): GatewayConfig {
  const base = defaultConfig();
  return { ...base, instance: 'unit', runs: { ...base.runs, startTimeoutSeconds: 2, ...runs } };
}

export function runSpec(init: MessageInitShape<typeof CreateRunRequestSchema> = {}): RunSpec {
  return specFromRequest(create(CreateRunRequestSchema, init));
}

/** Polls until `check` is true; fails after `ms`. */
export async function until(check: () => boolean, ms = 2000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}
