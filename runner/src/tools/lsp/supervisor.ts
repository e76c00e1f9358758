import * as path from 'node:path';
import { ToolError } from '../../tool';
import { resolveBinary } from './binaries';
import { LspClient, type ServerExit } from './client';
import { RootDetector } from './roots';
import { SERVERS, serverForExtension, type ServerSpec } from './servers';
import { withTimeout } from '../../util/timeout';
import { phase } from '../../util/phases';
import { noLifecycle, type ProcessLifecycle, type RestartCause } from '../../resources';
import type { StartingProcesses } from '../../startups';
import { holdWhileStarting } from './startupHold';

/** A server asked nothing counts as started this long after it is ready (see holdWhileStarting). */
const STARTED_AFTER_READY_MS = 3000;

export interface SupervisorSettings {
  /** Bound on initialize plus indexing progress before the first answer. */
  readyTimeoutMs: number;
  /** How long a server with no progress reported yet is given to begin some. */
  progressGraceMs: number;
  /** A server unused this long is stopped (0: never). */
  idleStopMs: number;
}

/** A running (or starting) server for one (server, root). */
export interface ServerHandle {
  spec: ServerSpec;
  root: string;
  binary: string;
  client: LspClient;
  /** Set when the ready bound was hit: answers may be incomplete. */
  readyNote?: string;
  /** Whether the wait after the first opened document was done. */
  settledOnce?: boolean;
}

/** What tether knows about one file: which server, which root, and which half is missing. */
export type Placement =
  | { ok: true; spec: ServerSpec; root: string; binary: string; languageId: string }
  | { ok: false; reason: string };

interface Slot {
  starting?: Promise<ServerHandle>;
  handle?: ServerHandle;
  lastCrash?: ServerExit;
  crashes: number;
  idleTimer?: NodeJS.Timeout;
  /** Why the next start replaces a server: it crashed, or a reload stopped it (an idle stop is no restart). */
  nextStart?: RestartCause;
}

const key = (spec: ServerSpec, root: string) => `${spec.id}\u0000${root}`;

/** Server environment: the run's, plus caches that work on a read-only image without network. */
function serverEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  env.GOPROXY ??= 'off';
  env.GOFLAGS ??= '-mod=mod';
  env.GOTOOLCHAIN ??= 'local';
  return env;
}

/**
 * Starts language servers lazily, one per (server, root): only when a root marker exists AND
 * the binary resolves. Restarts a crashed server on the next call, stops idle ones, and keeps
 * what `status` reports (pid, uptime, last crash).
 */
export class ServerSupervisor {
  readonly roots: RootDetector;
  private readonly slots = new Map<string, Slot>();
  /** Clients tether stopped itself (idle, reload, failed start): their exit is not a crash. */
  private readonly stoppedOnPurpose = new WeakSet<LspClient>();
  /** Told when a server is up and when it is gone, for the run's resource metrics. */
  lifecycle: ProcessLifecycle = noLifecycle;
  /** Told from a server's spawn until it is up, so the run's background work gives it the CPU. */
  startups?: StartingProcesses;
  startedAfterReadyMs = STARTED_AFTER_READY_MS;

  constructor(
    readonly workspaceRoot: string,
    private readonly settings: SupervisorSettings,
    readonly servers: ServerSpec[] = SERVERS,
  ) {
    this.roots = new RootDetector(workspaceRoot);
  }

  /**
   * Placements are remembered briefly per folder and extension: finding a root and a binary
   * costs a few dozen filesystem checks, too much for every hover. Writes forget them (a new
   * go.mod or node_modules/.bin must count at once), and so does time.
   */
  private readonly placements = new Map<string, { at: number; placement: Promise<Placement> }>();
  private static readonly PLACEMENT_TTL_MS = 5_000;

  forgetPlacements(): void {
    this.placements.clear();
  }

  /** Which server and root answer for a file, or plainly why none does. */
  async place(absFile: string): Promise<Placement> {
    const k = `${path.dirname(absFile)}\u0000${path.extname(absFile).toLowerCase()}`;
    const hit = this.placements.get(k);
    if (hit && Date.now() - hit.at < ServerSupervisor.PLACEMENT_TTL_MS) return hit.placement;
    const placement = this.placeUncached(absFile);
    this.placements.set(k, { at: Date.now(), placement });
    return placement;
  }

  private async placeUncached(absFile: string): Promise<Placement> {
    const ext = path.extname(absFile);
    const spec = serverForExtension(ext, this.servers);
    if (!spec) return { ok: false, reason: `no language server handles ${ext || 'files without an extension'}` };
    const root = await this.roots.rootFor(absFile, spec);
    const binary = await resolveBinary(spec.command, root ?? path.dirname(absFile), this.workspaceRoot);
    if (!root && !binary)
      return {
        ok: false,
        reason: `${spec.id}: no root marker (${spec.rootMarkers.join(', ')}) above this file and binary ${spec.command} not found`,
      };
    if (!root)
      return {
        ok: false,
        reason: `${spec.id}: no root marker (${spec.rootMarkers.join(', ')}) in this file's folder or above it inside the workspace`,
      };
    if (!binary)
      return {
        ok: false,
        reason: `${spec.id}: binary ${spec.command} not found (looked in node_modules/.bin, .venv/bin, venv/bin and $PATH)`,
      };
    return { ok: true, spec, root, binary, languageId: spec.extensions[ext.toLowerCase()] };
  }

  /** The ready server for a placement, starting (or restarting after a crash) as needed. */
  async ensure(p: Extract<Placement, { ok: true }>): Promise<ServerHandle> {
    const k = key(p.spec, p.root);
    let slot = this.slots.get(k);
    if (!slot) {
      slot = { crashes: 0 };
      this.slots.set(k, slot);
    }
    if (slot.handle?.client.alive) {
      this.touch(slot);
      return slot.handle;
    }
    let starting = slot.starting;
    if (!starting) {
      const s = slot;
      s.handle = undefined;
      starting = s.starting = this.start(p, s).finally(() => {
        s.starting = undefined;
      });
    }
    const handle = await starting;
    this.touch(slot);
    return handle;
  }

  private async start(p: Extract<Placement, { ok: true }>, slot: Slot): Promise<ServerHandle> {
    const client = new LspClient({
      command: p.binary,
      args: p.spec.args,
      root: p.root,
      env: serverEnv(),
      initializationOptions: p.spec.initializationOptions,
      settings: p.spec.settings,
      didChangeExtras: p.spec.didChangeExtras,
    });
    const startup = holdWhileStarting(client, this.startups, p.spec.id, this.startedAfterReadyMs);
    let up = false;
    client.on('exit', (exit: ServerExit) => {
      if (up) this.lifecycle.stopped(p.spec.id);
      if (this.stoppedOnPurpose.has(client)) return;
      slot.nextStart = 'crash';
      slot.lastCrash = exit;
      slot.crashes += 1;
      clearTimeout(slot.idleTimer);
    });
    const deadline = Date.now() + this.settings.readyTimeoutMs;
    try {
      await phase('lsp.start', { 'lsp.server': p.spec.id }, () =>
        withTimeout(client.initialize(), this.settings.readyTimeoutMs, () => {
          throw new Error(`no answer to initialize within ${this.settings.readyTimeoutMs} ms`);
        }),
      );
    } catch (err) {
      this.stoppedOnPurpose.add(client);
      client.process.kill('SIGKILL');
      const why = client.exit ? client.describeExit() : (err as Error).message;
      throw new ToolError(`${p.spec.id} for ${this.describeRoot(p.root)} failed to start: ${why}`);
    }
    startup.initialized();
    if (client.alive) {
      up = true;
      this.lifecycle.started(p.spec.id, slot.nextStart);
      slot.nextStart = undefined;
    }
    const idle = await client.waitIdle(deadline, this.settings.progressGraceMs);
    startup.ready();
    const handle: ServerHandle = { spec: p.spec, root: p.root, binary: p.binary, client };
    if (!idle && client.alive) {
      handle.readyNote = `${p.spec.id} was still busy (${client.progressTitles.join(', ') || 'indexing'}) after ${this.settings.readyTimeoutMs} ms; answers may be incomplete`;
    }
    slot.handle = handle;
    return handle;
  }

  private touch(slot: Slot): void {
    clearTimeout(slot.idleTimer);
    if (this.settings.idleStopMs <= 0) return;
    slot.idleTimer = setTimeout(() => {
      const h = slot.handle;
      if (!h) return;
      slot.handle = undefined;
      void this.stopOnPurpose(h.client);
    }, this.settings.idleStopMs);
    slot.idleTimer.unref();
  }

  private stopOnPurpose(client: LspClient): Promise<void> {
    this.stoppedOnPurpose.add(client);
    return client.stop();
  }

  /** Servers running now. */
  running(): ServerHandle[] {
    return [...this.slots.values()].flatMap((s) => (s.handle?.client.alive ? [s.handle] : []));
  }

  /** Stops the running server(s) of a root (or every running server) so the next call starts fresh. */
  async reload(root?: string): Promise<ServerHandle[]> {
    const stopped: ServerHandle[] = [];
    for (const slot of this.slots.values()) {
      const h = slot.handle;
      if (!h || (root !== undefined && h.root !== root)) continue;
      slot.handle = undefined;
      slot.nextStart = 'request';
      clearTimeout(slot.idleTimer);
      await this.stopOnPurpose(h.client);
      stopped.push(h);
    }
    return stopped;
  }

  async stopAll(): Promise<void> {
    await this.reload();
  }

  /** Ready servers for every root of the workspace whose binary resolves (for workspace-wide queries). */
  async handlesForWorkspace(): Promise<{ handles: ServerHandle[]; failures: string[] }> {
    const handles: ServerHandle[] = [];
    const failures: string[] = [];
    for (const spec of this.servers) {
      for (const root of await this.roots.allRoots(spec)) {
        const binary = await resolveBinary(spec.command, root, this.workspaceRoot);
        if (!binary) continue;
        try {
          handles.push(
            await this.ensure({ ok: true, spec, root, binary, languageId: Object.values(spec.extensions)[0] }),
          );
        } catch (err) {
          failures.push((err as Error).message);
        }
      }
    }
    return { handles, failures };
  }

  describeRoot(root: string): string {
    const rel = path.relative(this.workspaceRoot, root);
    return rel === '' ? '. (workspace root)' : rel;
  }

  /** Per known server: roots found, binary found, what runs (pid, uptime), last crash. */
  async status(): Promise<ServerStatus[]> {
    const out: ServerStatus[] = [];
    for (const spec of this.servers) {
      const roots = await this.roots.allRoots(spec);
      const binary = await resolveBinary(spec.command, roots[0] ?? this.workspaceRoot, this.workspaceRoot);
      const running: ServerStatus['running'] = [];
      const crashes: ServerStatus['crashes'] = [];
      for (const [k, slot] of this.slots) {
        if (!k.startsWith(`${spec.id}\u0000`)) continue;
        const root = k.slice(spec.id.length + 1);
        const h = slot.handle;
        if (h?.client.alive)
          running.push({
            root: this.describeRoot(root),
            pid: h.client.pid,
            uptimeMs: Date.now() - h.client.startedAt.getTime(),
            busy: h.client.progressTitles,
          });
        if (slot.lastCrash) crashes.push({ root: this.describeRoot(root), count: slot.crashes, last: slot.lastCrash });
      }
      out.push({
        id: spec.id,
        languages: spec.languages,
        source: spec.source,
        command: spec.command,
        binary,
        markers: spec.rootMarkers,
        roots: roots.map((r) => this.describeRoot(r)),
        running,
        crashes,
      });
    }
    return out;
  }
}

export interface ServerStatus {
  id: string;
  languages: string;
  source?: string;
  command: string;
  binary?: string;
  markers: string[];
  roots: string[];
  running: { root: string; pid?: number; uptimeMs: number; busy: string[] }[];
  crashes: { root: string; count: number; last: ServerExit }[];
}
