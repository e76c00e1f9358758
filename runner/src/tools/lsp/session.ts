import { promises as fs, statSync } from 'node:fs';
import type { RequestType } from 'vscode-jsonrpc';
import type { Diagnostic } from 'vscode-languageserver-protocol';
import { ToolError } from '../../tool';
import type { Workspace } from '../../workspace';
import type { PublishedDiagnostics } from './client';
import { LocationFormatter, toUri } from './format';
import { pullTsserverDiagnostics } from './tsserverDiagnostics';
import type { ServerSpec } from './servers';
import { activeLanguages } from './languages';
import { ServerSupervisor, type Placement, type ServerHandle, type SupervisorSettings } from './supervisor';
import { withTimeout } from '../../util/timeout';

export interface LspSettings extends SupervisorSettings {
  /** Bound on waiting for a file's diagnostics in `lsp diagnostics`. */
  diagnosticsTimeoutMs: number;
  /** Bound on the diagnostics wait folded into write/edit/apply_patch (the write itself never waits on it). */
  writeDiagnosticsTimeoutMs: number;
  /** After a matching publish, how long to wait for a follow-up one (syntax first, semantics later). */
  diagnosticsSettleMs: number;
  /** Bound on a project checker run (`diagnostics "*"`). */
  checkerTimeoutMs: number;
  /** Bound on one LSP request. */
  requestTimeoutMs: number;
}

export const DEFAULT_LSP_SETTINGS: LspSettings = {
  readyTimeoutMs: 60_000,
  progressGraceMs: 300,
  idleStopMs: 15 * 60_000,
  diagnosticsTimeoutMs: 15_000,
  writeDiagnosticsTimeoutMs: 5_000,
  diagnosticsSettleMs: 150,
  checkerTimeoutMs: 180_000,
  requestTimeoutMs: 30_000,
};

/** A workspace file as its server currently sees it. */
export interface SyncedFile {
  abs: string;
  uri: string;
  text: string;
  version: number;
  handle: ServerHandle;
  /** Diagnostics sequence number before this sync: later publishes are about this version. */
  seqBefore: number;
  changed: boolean;
}

/** The LSP side of one run: the supervisor, path display, and file sync through servers. */
export class LspSession {
  readonly supervisor: ServerSupervisor;
  readonly format: LocationFormatter;

  constructor(
    readonly workspace: Workspace,
    readonly settings: LspSettings,
    servers: ServerSpec[] = activeLanguages().servers,
  ) {
    this.supervisor = new ServerSupervisor(workspace.root, settings, servers);
    this.format = new LocationFormatter(workspace.root);
  }

  /** Resolves a model-given path inside the workspace and checks it is a readable file. */
  async resolveFile(file: string): Promise<string> {
    const abs = await this.workspace.resolve(file);
    const st = statSync(abs, { throwIfNoEntry: false });
    if (!st) throw new ToolError(`file not found: ${file}`);
    if (!st.isFile()) throw new ToolError(`${file} is not a file`);
    return abs;
  }

  async placeOrFail(abs: string): Promise<Extract<Placement, { ok: true }>> {
    const p = await this.supervisor.place(abs);
    if (!p.ok) throw new ToolError(`${this.format.display(abs)}: ${p.reason}`);
    return p;
  }

  /** Starts (if needed) the file's server and makes it see the file's current content. */
  async sync(abs: string, placement?: Extract<Placement, { ok: true }>, text?: string): Promise<SyncedFile> {
    const p = placement ?? (await this.placeOrFail(abs));
    const handle = await this.supervisor.ensure(p);
    const content = text ?? (await fs.readFile(abs, 'utf8'));
    const uri = toUri(abs);
    const seqBefore = handle.client.diagnosticsSeq;
    const { version, changed } = await handle.client.sync(uri, p.languageId, content);
    await this.settle(handle);
    return { abs, uri, text: content, version, handle, seqBefore, changed };
  }

  /**
   * Some servers load the project only when the first file opens (tsserver) or re-index after
   * changes; a query during that work gets partial answers. Wait (bounded) while progress is open.
   */
  private async settle(handle: ServerHandle): Promise<void> {
    const client = handle.client;
    const first = !handle.settledOnce;
    if (!first && !client.busy) return;
    handle.settledOnce = true;
    const idle = await client.waitIdle(
      Date.now() + this.settings.readyTimeoutMs,
      first ? this.settings.progressGraceMs : 0,
    );
    if (!idle && client.alive) {
      handle.readyNote = `${handle.spec.id} was still busy (${client.progressTitles.join(', ') || 'indexing'}) after ${this.settings.readyTimeoutMs} ms; answers may be incomplete`;
    } else handle.readyNote = undefined;
  }

  /** The diagnostics of exactly the synced version, or undefined if the bound passes first. */
  async diagnosticsOf(f: SyncedFile, timeoutMs: number): Promise<PublishedDiagnostics | undefined> {
    const client = f.handle.client;
    const pull =
      f.handle.spec.diagnostics === 'tsserver-pull'
        ? () => pullTsserverDiagnostics(client, f.abs)
        : client.pullsDiagnostics || f.handle.spec.diagnostics === 'pull'
          ? () => client.pullDiagnostics(f.uri)
          : undefined;
    if (pull) {
      const pulled = await withTimeout(pull(), timeoutMs, () => undefined);
      return pulled && { version: f.version, diagnostics: pulled, seq: client.diagnosticsSeq };
    }
    return f.handle.client.waitDiagnostics(
      f.uri,
      f.version,
      f.changed ? f.seqBefore : 0,
      Date.now() + timeoutMs,
      this.settings.diagnosticsSettleMs,
      f.handle.spec.diagnostics === 'versioned-push',
    );
  }

  /** An LSP request with the configured bound and the call's cancellation. */
  async request<P, R>(
    handle: ServerHandle,
    type: RequestType<P, R, unknown>,
    params: P,
    signal: AbortSignal,
  ): Promise<R> {
    const { method } = type;
    try {
      return await withTimeout(handle.client.request(type, params, signal), this.settings.requestTimeoutMs, () => {
        throw new Error(`${handle.spec.id} did not answer ${method} within ${this.settings.requestTimeoutMs} ms`);
      });
    } catch (err) {
      throw new ToolError(`${handle.spec.id}: ${method} failed: ${(err as Error).message}`);
    }
  }
}

/** Errors and warnings only: hints and infos are noise for an agent deciding what broke. */
export function errorsAndWarnings(ds: Diagnostic[]): Diagnostic[] {
  return ds.filter((d) => (d.severity ?? 1) <= 2);
}
