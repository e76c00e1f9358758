import { MessageChannel, type MessagePort, Worker } from 'node:worker_threads';
import type { FileSummary } from './fileIndex';
import type { FlatTree } from './flatTree';
import { ownerOf } from './owner';
import { serveModules } from './wasmModules';
import { runnerFile } from '../../files';

/** A file parsed in the background, on its way to the shard that owns it. */
export interface IndexedFile {
  abs: string;
  mtimeMs: number;
  size: number;
  utf8Bytes: number;
  tree: FlatTree;
  summary: FileSummary;
}

/** The arrays of an indexed file, moved (not copied) when it goes to another thread. */
export function indexedTransferables(file: IndexedFile): ArrayBuffer[] {
  const { tree, summary } = file;
  return [
    tree.typeIds,
    tree.flags,
    tree.starts,
    tree.ends,
    tree.lines,
    tree.parents,
    tree.sizes,
    summary.kinds,
    summary.words,
  ].map((a) => a.buffer as ArrayBuffer);
}

/** Where background trees go: the search shards (see SearchEngine). */
export interface IndexSink {
  /** Hands a file to its shard in this thread. */
  adopt(file: IndexedFile): void;
  /** When the shards are threads: a port to each, for an index thread to send to directly. */
  adoptionPorts?(): MessagePort[];
  /** An index thread is about to send its first tree through those ports. */
  treesComing?(): void;
}

/** A version of a file: its path, modification time and size. */
export interface FileVersion {
  abs: string;
  mtimeMs: number;
  size: number;
}

/** How a version is remembered as indexed. */
export function versionOf(f: { mtimeMs: number; size: number }): string {
  return `${f.mtimeMs}:${f.size}`;
}

/**
 * What the index thread is asked: walk a directory, look again at some files, or leave alone
 * files a query has parsed itself (their trees are already where they belong).
 */
export type IndexRequest =
  | { kind: 'dir'; abs: string }
  | { kind: 'files'; abs: string[] }
  | { kind: 'covered'; files: FileVersion[] }
  | { kind: 'pause' }
  | { kind: 'resume' }
  /** The runner's thread may end an idle thread: it first asks for the versions it indexed. */
  | { kind: 'retire' };
/** `file` only when the shards live in the runner's thread (else files go to them directly). */
export type IndexReply =
  | { kind: 'file'; file: IndexedFile }
  /** Sent once, before the thread's first tree goes to a shard port. */
  | { kind: 'treesComing' }
  | { kind: 'idle'; indexed: number }
  | { kind: 'retiring'; done: [string, string][] };

/** What an index thread starts with. */
export interface IndexThreadData {
  maxFileBytes: number;
  part: number;
  parts: number;
  /** Compiled WebAssembly, from the runner's thread (see wasmModules.ts). */
  modules: MessagePort;
  /** One port per search shard, or none: then files come back to the runner's thread. */
  shards: MessagePort[];
  /** Files indexed so far (one Int32), counted by the thread: no message per file. */
  counter: SharedArrayBuffer;
  /** Versions indexed (path → "mtime:size") by this part's earlier threads, or covered by queries. */
  done: [string, string][];
}

/**
 * Parses files as they arrive in the workspace, on threads of its own at the lowest CPU
 * priority (nice 19), so it only uses time nothing else wants. Each tree goes to `deliver`
 * (the search shards), which keep it if there is room. Queries never wait for this: they
 * parse what is not there yet. While paused (a query runs, a language server starts), the
 * threads stop after the file in hand, and threads not started yet are not started.
 */
export class BackgroundIndexer {
  private readonly threads: IndexThread[];
  private paused = 0;

  /**
   * `threads` index in parallel, each its share of the files (they only use idle CPU). A
   * thread idle for `retireAfterMs` is ended, which returns its WebAssembly heap (a heap
   * never shrinks while its thread lives); the next arrival starts it again.
   */
  constructor(maxFileBytes: number, sink: IndexSink, threads = 1, retireAfterMs = DEFAULT_RETIRE_AFTER_MS) {
    this.threads = Array.from(
      { length: Math.max(1, threads) },
      (_, part) => new IndexThread(maxFileBytes, sink, part, Math.max(1, threads), () => this.paused, retireAfterMs),
    );
  }

  /** Index threads running now. */
  get running(): number {
    return this.threads.filter((t) => t.running).length;
  }

  /** Files indexed so far. */
  get indexed(): number {
    return this.threads.reduce((n, t) => n + t.indexed, 0);
  }

  /** Whether the index waits now (for a query, or a process starting). */
  get isPaused(): boolean {
    return this.paused > 0;
  }

  /** Indexes everything under a directory (as a search would walk it). */
  indexDir(abs: string): void {
    this.threads.forEach((t) => t.send({ kind: 'dir', abs }));
  }

  /** Indexes these files again (they were written). */
  indexFiles(abs: string[]): void {
    if (abs.length > 0) this.threads.forEach((t) => t.send({ kind: 'files', abs }));
  }

  /**
   * Something needs the CPU more: a query (it parses what it needs itself, so the index
   * threads wait until it is done rather than parse the same files at the same time), or a
   * language server starting. Pauses nest; each `resume` ends one.
   */
  pause(): void {
    this.paused++;
    this.threads.forEach((t) => t.tell({ kind: 'pause' }));
  }

  resume(): void {
    if (this.paused === 0) return;
    this.paused--;
    this.threads.forEach((t) => t.tell({ kind: 'resume' }));
    if (this.paused === 0) this.threads.forEach((t) => t.startDeferred());
  }

  /** These versions were parsed by a query: indexing them again would only repeat its work. */
  covered(files: FileVersion[]): void {
    if (files.length > 0) this.threads.forEach((t) => t.tell({ kind: 'covered', files }));
  }

  /** Resolves once every request sent so far is done (for tests and benchmarks). */
  async idle(): Promise<void> {
    await Promise.all(this.threads.map((t) => t.idle()));
  }

  async close(): Promise<void> {
    await Promise.all(this.threads.map((t) => t.close()));
  }
}

const DEFAULT_RETIRE_AFTER_MS = 30_000;

/** One index thread, owning the files whose path hashes to its part. */
class IndexThread {
  private worker?: Worker;
  private busy = 0;
  private idleWaiters: (() => void)[] = [];
  /** Work that came while paused before the thread started: it starts when the pause ends. */
  private deferred: IndexRequest[] = [];
  private readonly counter = new Int32Array(new SharedArrayBuffer(4));
  /** While no thread runs: the versions indexed or covered, handed to the next thread. */
  private done = new Map<string, string>();
  private retireTimer?: NodeJS.Timeout;

  constructor(
    private readonly maxFileBytes: number,
    private readonly sink: IndexSink,
    private readonly part: number,
    private readonly parts: number,
    private readonly pausedNow: () => number,
    private readonly retireAfterMs: number,
  ) {}

  get running(): boolean {
    return this.worker !== undefined;
  }

  /** Files this thread indexed (and handed on) so far. */
  get indexed(): number {
    return Atomics.load(this.counter, 0);
  }

  private start(): Worker {
    if (this.worker) return this.worker;
    const { port1, port2 } = new MessageChannel();
    serveModules(port1);
    const shards = this.sink.adoptionPorts?.() ?? [];
    const data: IndexThreadData = {
      maxFileBytes: this.maxFileBytes,
      part: this.part,
      parts: this.parts,
      modules: port2,
      shards,
      counter: this.counter.buffer as SharedArrayBuffer,
      done: [...this.done],
    };
    this.done.clear();
    const w = new Worker(runnerFile('tools/ast/indexWorker.js'), {
      workerData: data,
      transferList: [port2, ...shards],
    });
    w.on('message', (reply: IndexReply) => {
      if (reply.kind === 'file') {
        this.sink.adopt(reply.file);
        return;
      }
      if (reply.kind === 'treesComing') {
        this.sink.treesComing?.();
        return;
      }
      if (reply.kind === 'retiring') {
        // Work sent meanwhile keeps it (it still has its versions); else it ends here.
        if (this.busy > 0 || this.worker !== w) return;
        this.done = new Map(reply.done);
        this.worker = undefined;
        void w.terminate();
        return;
      }
      if (--this.busy === 0) {
        this.idleWaiters.splice(0).forEach((fn) => fn());
        this.armRetire();
      }
    });
    const stop = () => {
      if (this.worker !== w) return; // retired: already let go
      this.worker = undefined;
      this.busy = 0;
      this.idleWaiters.splice(0).forEach((fn) => fn());
    };
    w.on('error', stop);
    w.on('exit', stop);
    // After the listeners: adding a 'message' listener refs the worker's port again.
    w.unref(); // background work must not keep the runner alive
    this.worker = w;
    for (let i = this.pausedNow(); i > 0; i--) w.postMessage({ kind: 'pause' } satisfies IndexRequest);
    return w;
  }

  /** After the thread's work is done: end it if it gets none for a while. */
  private armRetire(): void {
    clearTimeout(this.retireTimer);
    if (this.retireAfterMs <= 0) return;
    this.retireTimer = setTimeout(() => {
      if (this.busy === 0) this.worker?.postMessage({ kind: 'retire' } satisfies IndexRequest);
    }, this.retireAfterMs);
    this.retireTimer.unref();
  }

  send(req: IndexRequest): void {
    clearTimeout(this.retireTimer);
    this.busy++;
    // Starting a thread costs CPU at normal priority (before it lowers its own): not now.
    if (!this.worker && this.pausedNow() > 0) this.deferred.push(req);
    else this.start().postMessage(req);
  }

  /** Starts the thread for work that came while paused. */
  startDeferred(): void {
    if (this.deferred.length === 0) return;
    const w = this.start();
    if (this.idleWaiters.length > 0) w.ref(); // as idle() does for a thread already running
    this.deferred.splice(0).forEach((req) => w.postMessage(req));
  }

  /** A notice that needs no answer (a thread not running starts with the pause count and versions). */
  tell(req: IndexRequest): void {
    if (this.worker) this.worker.postMessage(req);
    else if (req.kind === 'covered')
      for (const f of req.files) {
        if (ownerOf(f.abs, this.parts) === this.part) this.done.set(f.abs, versionOf(f));
      }
  }

  idle(): Promise<void> {
    if (this.busy === 0) return Promise.resolve();
    this.worker?.ref(); // someone waits: stay alive until the work is done
    return new Promise((r) =>
      this.idleWaiters.push(() => {
        this.worker?.unref();
        r();
      }),
    );
  }

  async close(): Promise<void> {
    clearTimeout(this.retireTimer);
    this.deferred = [];
    await this.worker?.terminate();
    this.worker = undefined;
    this.busy = 0;
    this.idleWaiters.splice(0).forEach((fn) => fn());
  }
}
