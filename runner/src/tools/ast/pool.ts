import { MessageChannel, type MessagePort, Worker } from 'node:worker_threads';
import { ToolError } from '../../tool';
import { Shard, type FileOutcome, type ShardJob } from './shard';
import { indexedTransferables, type FileVersion, type IndexedFile } from './indexer';
import { ownerOf } from './owner';
import { serveModules } from './wasmModules';
import type { WorkerReply, WorkerRequest } from './worker';
import { runnerFile } from '../../files';

/** Runs shard jobs: on worker threads, or in this thread when `workers` is 0. */
export interface SearchEngine {
  /** Each file always goes to the same shard, so its cached tree is found again. */
  run(job: ShardJob, signal?: AbortSignal): Promise<FileOutcome[]>;
  invalidate(abs: string): void;
  /** Offers a tree parsed in the background to the shard that owns the file. */
  adopt(file: IndexedFile): void;
  /**
   * When the shards are threads: a port to each, for one index thread to hand its trees to
   * the owning shard directly, not through this thread (see `ownerOf`). A shard not started
   * yet takes what was sent once it starts.
   */
  adoptionPorts?(): MessagePort[];
  /** Trees are on their way through those ports: start the shards that take them. */
  treesComing?(): void;
  /** Told when a job starts and when it ends (with the versions it parsed), for the indexer. */
  jobs?: JobListener;
  close(): Promise<void>;
}

export interface JobListener {
  started(): void;
  /** `parsed`: the versions the job parsed or found parsed. */
  finished(parsed: FileVersion[]): void;
}

/** Runs a job between the listener's started and finished (also when the job fails). */
async function tracked(
  listener: JobListener | undefined,
  job: ShardJob,
  run: () => Promise<FileOutcome[]>,
): Promise<FileOutcome[]> {
  listener?.started();
  let outcomes: FileOutcome[] = [];
  try {
    outcomes = await run();
    return outcomes;
  } finally {
    listener?.finished(parsedIn(job, outcomes));
  }
}

/** The versions a job parsed or found parsed: neither skipped by a summary or a word, nor binary. */
function parsedIn(job: ShardJob, outcomes: FileOutcome[]): FileVersion[] {
  const parsed = new Set(outcomes.filter((o) => !o.prefiltered && !o.binary).map((o) => o.abs));
  return job.files.filter((f) => parsed.has(f.abs)).map(({ abs, mtimeMs, size }) => ({ abs, mtimeMs, size }));
}

/** Puts the shards' outcomes back in the job's file order. */
function merge(files: ShardJob['files'], parts: FileOutcome[][]): FileOutcome[] {
  const byPath = new Map<string, FileOutcome>();
  for (const part of parts) for (const o of part) byPath.set(o.abs, o);
  return files.flatMap((f) => byPath.get(f.abs) ?? []);
}

export class InProcessEngine implements SearchEngine {
  readonly shard: Shard;
  jobs?: JobListener;
  constructor(cacheBytes: number) {
    this.shard = new Shard(cacheBytes);
  }
  run(job: ShardJob, signal?: AbortSignal): Promise<FileOutcome[]> {
    return tracked(this.jobs, job, () => this.shard.run(job, () => !!signal?.aborted));
  }
  invalidate(abs: string): void {
    this.shard.invalidate(abs);
  }
  adopt(file: IndexedFile): void {
    this.shard.adopt(file);
  }
  async close(): Promise<void> {
    this.shard.clear();
  }
}

class ShardWorker {
  private worker?: Worker;
  private next = 1;
  /** Adoption ports made before the worker started: handed to it when it starts. */
  private readonly pendingPorts: MessagePort[] = [];
  private readonly waiting = new Map<number, { resolve: (r: FileOutcome[]) => void; reject: (e: Error) => void }>();

  constructor(private readonly cacheBytes: number) {}

  private start(): Worker {
    if (this.worker) return this.worker;
    const { port1, port2 } = new MessageChannel();
    serveModules(port1);
    const w = new Worker(runnerFile('tools/ast/worker.js'), {
      workerData: { cacheBytes: this.cacheBytes, modules: port2 },
      transferList: [port2],
    });
    w.on('message', (reply: WorkerReply) => {
      const p = this.waiting.get(reply.id);
      if (!p) return;
      this.waiting.delete(reply.id);
      if (reply.ok) p.resolve(reply.result as FileOutcome[]);
      else p.reject(reply.tool ? new ToolError(reply.error) : new Error(reply.error));
    });
    const fail = (err: Error) => {
      this.worker = undefined;
      for (const p of this.waiting.values()) p.reject(new Error(`search worker stopped: ${err.message}`));
      this.waiting.clear();
    };
    w.on('error', fail);
    w.on('exit', (code) => fail(new Error(`exit code ${code}`)));
    // After the listeners: adding a 'message' listener refs the worker's port again.
    w.unref(); // an idle pool must not keep the runner alive
    this.worker = w;
    for (const port of this.pendingPorts.splice(0)) {
      try {
        w.postMessage({ kind: 'adoptFrom', port } satisfies WorkerRequest, [port]);
      } catch {
        // Closed with its index thread before its 'close' event came: it carries nothing.
      }
    }
    return w;
  }

  run(job: ShardJob, signal?: AbortSignal): Promise<FileOutcome[]> {
    const w = this.start();
    const id = this.next++;
    const cancel = () => w.postMessage({ id, kind: 'cancel' } satisfies WorkerRequest);
    signal?.addEventListener('abort', cancel, { once: true });
    return new Promise<FileOutcome[]>((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      w.ref(); // busy: keep the process alive until the answer comes
      w.postMessage({ id, kind: 'run', job } satisfies WorkerRequest);
    }).finally(() => {
      signal?.removeEventListener('abort', cancel);
      if (this.waiting.size === 0) this.worker?.unref();
    });
  }

  send(msg: WorkerRequest): void {
    this.worker?.postMessage(msg);
  }

  /** Starts the worker if need be: a background tree is worth keeping before any query. */
  adopt(file: IndexedFile): void {
    this.start().postMessage({ kind: 'adopt', file } satisfies WorkerRequest, indexedTransferables(file));
  }

  /**
   * A port whose messages (IndexedFile) the worker adopts. A worker not started yet is not
   * started for it (booting a thread costs CPU at normal priority): what is sent waits in
   * the port until the worker starts (`startForTrees`, or the first job).
   */
  adoptionPort(): MessagePort {
    const { port1, port2 } = new MessageChannel();
    if (this.worker) this.worker.postMessage({ kind: 'adoptFrom', port: port1 } satisfies WorkerRequest, [port1]);
    else {
      // An index thread that ends closes its end: a port kept for a later start is let go then.
      this.pendingPorts.push(port1);
      port1.once('close', () => {
        const i = this.pendingPorts.indexOf(port1);
        if (i >= 0) this.pendingPorts.splice(i, 1);
      });
    }
    return port2;
  }

  startForTrees(): void {
    if (this.pendingPorts.length > 0) this.start();
  }

  async close(): Promise<void> {
    await this.worker?.terminate();
    this.worker = undefined;
  }
}

/**
 * Shards files over worker threads (parsing is the expensive part, and it parallelises).
 * Each worker keeps the trees of its own files; the cache bound is split between them.
 */
export class WorkerPoolEngine implements SearchEngine {
  private readonly workers: ShardWorker[];
  jobs?: JobListener;

  constructor(count: number, cacheBytes: number) {
    this.workers = Array.from({ length: count }, () => new ShardWorker(Math.floor(cacheBytes / count)));
  }

  run(job: ShardJob, signal?: AbortSignal): Promise<FileOutcome[]> {
    return tracked(this.jobs, job, () => this.runSharded(job, signal));
  }

  private async runSharded(job: ShardJob, signal?: AbortSignal): Promise<FileOutcome[]> {
    const split: ShardJob['files'][] = this.workers.map(() => []);
    for (const f of job.files) split[ownerOf(f.abs, this.workers.length)].push(f);
    const parts = await Promise.all(
      split.map((files, i) => (files.length ? this.workers[i].run({ ...job, files }, signal) : Promise.resolve([]))),
    );
    return merge(job.files, parts);
  }

  invalidate(abs: string): void {
    this.workers[ownerOf(abs, this.workers.length)].send({ kind: 'invalidate', abs });
  }

  adopt(file: IndexedFile): void {
    this.workers[ownerOf(file.abs, this.workers.length)].adopt(file);
  }

  /**
   * Index threads send straight to the shards: relaying each tree through the runner's
   * main thread (at normal priority) was part of what indexing cost a starting language
   * server. A shard worker that died and was restarted no longer hears from them (its trees
   * are parsed by the queries that need them).
   */
  adoptionPorts(): MessagePort[] {
    return this.workers.map((w) => w.adoptionPort());
  }

  treesComing(): void {
    this.workers.forEach((w) => w.startForTrees());
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.close()));
  }
}
