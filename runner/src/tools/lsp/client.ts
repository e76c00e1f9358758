import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { createMessageConnection, type MessageConnection, type RequestType } from 'vscode-jsonrpc/node';
import { FramedMessageReader, FramedMessageWriter } from '../../../../protocol/src/framing';
import {
  ApplyWorkspaceEditRequest,
  ConfigurationRequest,
  DidChangeTextDocumentNotification,
  DidChangeWatchedFilesNotification,
  DidCloseTextDocumentNotification,
  DidOpenTextDocumentNotification,
  DidSaveTextDocumentNotification,
  DocumentDiagnosticRequest,
  ExitNotification,
  FileChangeType,
  InitializedNotification,
  InitializeRequest,
  PublishDiagnosticsNotification,
  RegistrationRequest,
  ShowMessageRequest,
  ShutdownRequest,
  UnregistrationRequest,
  WorkDoneProgressCreateRequest,
  WorkspaceFoldersRequest,
  type ClientCapabilities,
  type Diagnostic,
  type ServerCapabilities,
  type WorkDoneProgressBegin,
  type WorkDoneProgressEnd,
  type WorkDoneProgressReport,
} from 'vscode-languageserver-protocol';
import { nameChild } from '../../oom/children';
import { withTimeout } from '../../util/timeout';
import { TextTail } from '../../util/cappedTail';
import { phase } from '../../util/phases';

export interface ServerExit {
  at: Date;
  code: number | null;
  signal: NodeJS.Signals | null;
  stderrTail: string;
}

/** The latest diagnostics a server published for one document. */
export interface PublishedDiagnostics {
  version?: number;
  diagnostics: Diagnostic[];
  /** Increases with every publish this client receives, for "newer than" waits. */
  seq: number;
}

interface OpenDocument {
  version: number;
  text: string;
  languageId: string;
}

export interface LaunchOptions {
  command: string;
  args: string[];
  root: string;
  env: NodeJS.ProcessEnv;
  initializationOptions?: unknown;
  /** Answers to workspace/configuration, by section. */
  settings?: Record<string, unknown>;
  /** Extra fields of every didChange (server extensions). */
  didChangeExtras?: Record<string, unknown>;
}

const CAPABILITIES: ClientCapabilities = {
  general: { positionEncodings: ['utf-16'] },
  window: { workDoneProgress: true },
  workspace: {
    workspaceFolders: true,
    configuration: true,
    applyEdit: false,
    workspaceEdit: { documentChanges: true, resourceOperations: ['create', 'rename', 'delete'] },
    symbol: { dynamicRegistration: false },
  },
  textDocument: {
    synchronization: { didSave: true, dynamicRegistration: false },
    publishDiagnostics: { versionSupport: true, relatedInformation: false, codeDescriptionSupport: false },
    diagnostic: { dynamicRegistration: true, relatedDocumentSupport: false },
    hover: { contentFormat: ['markdown', 'plaintext'] },
    definition: { linkSupport: true },
    typeDefinition: { linkSupport: true },
    implementation: { linkSupport: true },
    references: {},
    documentSymbol: { hierarchicalDocumentSymbolSupport: true },
    codeAction: {
      codeActionLiteralSupport: {
        codeActionKind: {
          valueSet: [
            '',
            'quickfix',
            'refactor',
            'refactor.extract',
            'refactor.inline',
            'refactor.rewrite',
            'source',
            'source.organizeImports',
            'source.fixAll',
          ],
        },
      },
      isPreferredSupport: true,
    },
    rename: { prepareSupport: true },
  },
  // rust-analyzer's: it says when it is done loading the project (`quiescent`), which its
  // work-done progress does not (one phase ends before the next begins).
  experimental: { serverStatusNotification: true },
};

/**
 * One language-server process spoken to over stdio (JSON-RPC via vscode-jsonrpc). Keeps the
 * documents it has opened in sync, records published diagnostics and work-done progress, and
 * answers the server's own requests (configuration, progress tokens) with neutral values.
 */
export class LspClient extends EventEmitter {
  readonly process: ChildProcess;
  readonly connection: MessageConnection;
  readonly startedAt = new Date();
  capabilities: ServerCapabilities = {};
  exit?: ServerExit;
  private readonly stderrTail = new TextTail(2000);
  private readonly documents = new Map<string, OpenDocument>();
  private readonly diagnostics = new Map<string, PublishedDiagnostics>();
  private readonly progress = new Map<string | number, string>();
  private progressEverBegun = false;
  /** From `experimental/serverStatus`: false while the server is still loading or analysing. */
  private quiescent?: boolean;
  private seq = 0;
  private readonly registered = new Set<string>();

  constructor(readonly options: LaunchOptions) {
    super();
    this.process = spawn(options.command, options.args, {
      cwd: options.root,
      env: options.env,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    nameChild(this.process, 'the language server', path.basename(options.command));
    this.process.stderr!.on('data', (d: Buffer) => {
      this.stderrTail.push(d.toString('utf8'));
    });
    // Writing to a dead server raises EPIPE on stdin; the exit handler reports the crash.
    this.process.stdin!.on('error', () => undefined);
    this.connection = createMessageConnection(
      new FramedMessageReader(this.process.stdout!),
      new FramedMessageWriter(this.process.stdin!),
    );
    this.connection.onError(() => undefined);
    this.process.on('error', (err) => this.markExited(null, null, err.message));
    this.process.on('exit', (code, signal) => this.markExited(code, signal));
    this.registerHandlers();
    this.connection.listen();
  }

  get pid(): number | undefined {
    return this.process.pid;
  }

  get alive(): boolean {
    return this.exit === undefined;
  }

  /** Whether any work-done progress (indexing, project loading) is still open. */
  get busy(): boolean {
    return this.progress.size > 0 || this.quiescent === false;
  }

  get progressTitles(): string[] {
    const titles = [...this.progress.values()];
    return this.quiescent === false && titles.length === 0 ? ['loading the project'] : titles;
  }

  get hasReportedProgress(): boolean {
    return this.progressEverBegun;
  }

  private markExited(code: number | null, signal: NodeJS.Signals | null, extra = ''): void {
    if (this.exit) return;
    this.exit = { at: new Date(), code, signal, stderrTail: (this.stderrTail.text() + extra).trim() };
    this.connection.dispose();
    this.emit('exit', this.exit);
  }

  private registerHandlers(): void {
    const c = this.connection;
    c.onRequest(ConfigurationRequest.type, (params) =>
      params.items.map((i) => (i.section !== undefined ? this.options.settings?.[i.section] : undefined) ?? null),
    );
    // A void result goes out as `null`, the empty success.
    c.onRequest(WorkDoneProgressCreateRequest.type, () => undefined);
    c.onRequest(RegistrationRequest.type, (p) => {
      for (const r of p.registrations ?? []) this.registered.add(r.method);
    });
    c.onRequest(UnregistrationRequest.type, () => undefined);
    c.onRequest(ShowMessageRequest.type, () => null);
    c.onRequest(WorkspaceFoldersRequest.type, () => [this.workspaceFolder()]);
    c.onRequest(ApplyWorkspaceEditRequest.type, () => ({
      applied: false,
      failureReason: 'tether applies edits itself',
    }));
    // Refresh requests (diagnostics, semantic tokens, inlay hints…) and anything else: an empty
    // success. Some servers exit when a request of theirs is answered with an error.
    c.onRequest(() => null);
    c.onNotification(PublishDiagnosticsNotification.type, (p) => {
      const entry: PublishedDiagnostics = {
        version: p.version ?? undefined,
        diagnostics: p.diagnostics,
        seq: ++this.seq,
      };
      this.diagnostics.set(p.uri, entry);
      this.emit('diagnostics', p.uri, entry);
    });
    // Work-done progress under any token: no token is claimed with onProgress, so all of it lands here.
    c.onUnhandledProgress(
      (p: { token: string | number; value: WorkDoneProgressBegin | WorkDoneProgressReport | WorkDoneProgressEnd }) => {
        const v = p.value;
        if (!v || typeof v !== 'object') return;
        if (v.kind === 'begin') {
          this.progressEverBegun = true;
          this.progress.set(p.token, v.title);
        } else if (v.kind === 'end') this.progress.delete(p.token);
        this.emit('progress');
      },
    );
    c.onNotification('experimental/serverStatus', (p: { quiescent?: boolean }) => {
      if (typeof p?.quiescent !== 'boolean') return;
      this.progressEverBegun = true;
      this.quiescent = p.quiescent;
      this.emit('progress');
    });
    c.onNotification(() => undefined);
  }

  private workspaceFolder() {
    return { uri: pathToFileURL(this.options.root).href, name: this.options.root.split('/').pop() || 'root' };
  }

  async initialize(): Promise<void> {
    const folder = this.workspaceFolder();
    const result = await this.request(InitializeRequest.type, {
      processId: process.pid,
      clientInfo: { name: 'tether' },
      rootUri: folder.uri,
      rootPath: this.options.root,
      workspaceFolders: [folder],
      capabilities: CAPABILITIES,
      initializationOptions: this.options.initializationOptions,
    });
    this.capabilities = result.capabilities ?? {};
    await this.connection.sendNotification(InitializedNotification.type, {});
  }

  /** Requests sent and not answered yet. */
  inFlight = 0;

  /** A request that fails at once (instead of hanging) if the server dies; 'answered' follows its answer. */
  request<P, R>(type: RequestType<P, R, unknown>, params: P, signal?: AbortSignal): Promise<R> {
    this.inFlight++;
    return phase('lsp.request', { 'lsp.method': type.method }, () =>
      this.untilExit(() => this.connection.sendRequest(type, params), signal),
    ).finally(() => {
      this.inFlight--;
      this.emit('answered');
    });
  }

  private untilExit<R>(send: () => Promise<R>, signal?: AbortSignal): Promise<R> {
    if (this.exit) return Promise.reject(new Error(this.describeExit()));
    return new Promise<R>((resolve, reject) => {
      const onExit = () => reject(new Error(this.describeExit()));
      this.once('exit', onExit);
      const onAbort = () => reject(new Error('cancelled'));
      signal?.addEventListener('abort', onAbort, { once: true });
      send()
        .then(
          (r) => resolve(r),
          (e: Error) => reject(e),
        )
        .finally(() => {
          this.off('exit', onExit);
          signal?.removeEventListener('abort', onAbort);
        });
    });
  }

  describeExit(): string {
    const e = this.exit;
    if (!e) return 'running';
    const how = e.signal ? `killed by ${e.signal}` : `exited with code ${e.code}`;
    return `language server ${this.options.command} ${how}${e.stderrTail ? `: ${e.stderrTail.split('\n').slice(-3).join(' | ')}` : ''}`;
  }

  /** Waits until no work-done progress is open, or the deadline passes. Returns true if idle. */
  async waitIdle(deadline: number, graceMs: number): Promise<boolean> {
    // A server starts its indexing progress shortly after `initialized`; give it a moment to.
    const graceUntil = Date.now() + graceMs;
    for (;;) {
      if (!this.alive) return false;
      if (!this.busy && (this.progressEverBegun || Date.now() >= graceUntil)) return true;
      const now = Date.now();
      if (now >= deadline) return false;
      await new Promise<void>((resolve) => {
        const t = setTimeout(done, Math.min(50, deadline - now));
        const self = this;
        function done() {
          clearTimeout(t);
          self.off('progress', done);
          self.off('exit', done);
          resolve();
        }
        this.on('progress', done);
        this.on('exit', done);
      });
    }
  }

  /**
   * Makes the server's view of a file equal `text`: opens it, or sends the whole new text as
   * a change. Returns the document version the server now has and whether anything was sent.
   */
  async sync(uri: string, languageId: string, text: string): Promise<{ version: number; changed: boolean }> {
    if (this.exit) throw new Error(this.describeExit());
    const doc = this.documents.get(uri);
    if (!doc) {
      const d = { version: 1, text, languageId };
      this.documents.set(uri, d);
      await this.connection.sendNotification(DidOpenTextDocumentNotification.type, {
        textDocument: { uri, languageId, version: d.version, text },
      });
      return { version: d.version, changed: true };
    }
    if (doc.text === text) return { version: doc.version, changed: false };
    doc.version += 1;
    doc.text = text;
    await this.connection.sendNotification(DidChangeTextDocumentNotification.type, {
      textDocument: { uri, version: doc.version },
      contentChanges: [{ text }],
      ...this.options.didChangeExtras,
    });
    return { version: doc.version, changed: true };
  }

  async save(uri: string): Promise<void> {
    const doc = this.documents.get(uri);
    if (!doc || this.exit) return;
    const save = this.capabilities.textDocumentSync;
    const includeText = typeof save === 'object' && typeof save.save === 'object' && save.save.includeText;
    await this.connection.sendNotification(DidSaveTextDocumentNotification.type, {
      textDocument: { uri },
      ...(includeText ? { text: doc.text } : {}),
    });
  }

  /** Whether the server answers textDocument/diagnostic (pull), statically or by registration. */
  get pullsDiagnostics(): boolean {
    return Boolean(this.capabilities.diagnosticProvider) || this.registered.has(DocumentDiagnosticRequest.method);
  }

  /** Asks for a document's diagnostics (LSP pull); exact for the version the server has. */
  async pullDiagnostics(uri: string): Promise<Diagnostic[]> {
    const r = await this.request(DocumentDiagnosticRequest.type, { textDocument: { uri } });
    return (r && 'items' in r && r.items) || [];
  }

  /** Tells the server files changed on disk (config files, files it has not opened, deletions). */
  async filesChanged(changes: { uri: string; deleted: boolean }[]): Promise<void> {
    if (this.exit || changes.length === 0) return;
    for (const c of changes) {
      if (c.deleted && this.documents.delete(c.uri))
        await this.connection.sendNotification(DidCloseTextDocumentNotification.type, { textDocument: { uri: c.uri } });
    }
    await this.connection.sendNotification(DidChangeWatchedFilesNotification.type, {
      changes: changes.map((c) => ({ uri: c.uri, type: c.deleted ? FileChangeType.Deleted : FileChangeType.Changed })),
    });
  }

  openDocument(uri: string): { version: number; text: string } | undefined {
    return this.documents.get(uri);
  }

  published(uri: string): PublishedDiagnostics | undefined {
    return this.diagnostics.get(uri);
  }

  get diagnosticsSeq(): number {
    return this.seq;
  }

  /**
   * Waits for the diagnostics of `version` of a document: a publish carrying that version,
   * or — for servers that do not send versions — any publish newer than `afterSeq`. After the
   * first match it lingers `settleMs` for a follow-up publish (servers that send syntax and
   * semantic results separately). Resolves undefined at the deadline.
   */
  waitDiagnostics(
    uri: string,
    version: number,
    afterSeq: number,
    deadline: number,
    settleMs: number,
    requireVersion = false,
  ): Promise<PublishedDiagnostics | undefined> {
    const matches = (p: PublishedDiagnostics | undefined) =>
      p !== undefined && p.seq > afterSeq && (p.version === undefined ? !requireVersion : p.version >= version);
    return new Promise((resolve) => {
      let settleTimer: NodeJS.Timeout | undefined;
      const finish = (value: PublishedDiagnostics | undefined) => {
        clearTimeout(deadlineTimer);
        clearTimeout(settleTimer);
        this.off('diagnostics', onPublish);
        this.off('exit', onExit);
        resolve(value);
      };
      const arm = () => {
        clearTimeout(settleTimer);
        if (settleMs <= 0) finish(this.diagnostics.get(uri));
        else settleTimer = setTimeout(() => finish(this.diagnostics.get(uri)), settleMs);
      };
      // A versioned publish is final for its version; an unversioned one may be followed by more.
      const onPublish = (u: string, p: PublishedDiagnostics) => {
        if (u === uri && matches(p)) p.version === undefined ? arm() : finish(p);
      };
      const onExit = () => finish(undefined);
      const deadlineTimer = setTimeout(
        () => finish(matches(this.diagnostics.get(uri)) ? this.diagnostics.get(uri) : undefined),
        Math.max(0, deadline - Date.now()),
      );
      this.on('diagnostics', onPublish);
      this.on('exit', onExit);
      const now = this.diagnostics.get(uri);
      if (matches(now)) now!.version === undefined ? arm() : finish(now);
    });
  }

  /** Orderly stop (shutdown, exit), then a kill if the server lingers. */
  async stop(graceMs = 2000): Promise<void> {
    if (this.exit) return;
    const exited = new Promise<void>((resolve) => this.once('exit', () => resolve()));
    try {
      await withTimeout(
        this.untilExit(() => this.connection.sendRequest(ShutdownRequest.type)),
        graceMs,
        () => undefined,
      );
      await this.connection.sendNotification(ExitNotification.type);
    } catch {
      /* already going */
    }
    const t = setTimeout(() => this.process.kill('SIGKILL'), graceMs);
    await exited;
    clearTimeout(t);
  }
}
