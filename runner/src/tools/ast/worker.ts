import { type MessagePort, parentPort, workerData } from 'node:worker_threads';
import type { IndexedFile } from './indexer';
import { languageById, loadLanguage } from './languages';
import { Shard, type ShardJob } from './shard';
import { modulesFrom } from './wasmModules';

/** A search worker: owns one shard (its own parsers and tree cache) and answers jobs. */
export type WorkerRequest =
  | { id: number; kind: 'run'; job: ShardJob }
  | { id: number; kind: 'cancel' }
  | { kind: 'invalidate'; abs: string }
  | { kind: 'adopt'; file: IndexedFile }
  /** A port an index thread sends its trees for this shard through (each message an IndexedFile). */
  | { kind: 'adoptFrom'; port: MessagePort }
  | { kind: 'clear' };
export type WorkerReply =
  | { id: number; ok: true; result: unknown }
  | { id: number; ok: false; error: string; tool: boolean };

const { cacheBytes, modules } = workerData as { cacheBytes: number; modules: MessagePort };
modulesFrom(modules); // compiled WebAssembly comes from the runner's thread, shared
const shard = new Shard(cacheBytes);
const cancelled = new Set<number>();
const warmed = new Set<string>();

/** The grammar of files that arrive is loaded now, not by the first query that needs it. */
function warm(language: string): void {
  if (warmed.has(language)) return;
  warmed.add(language);
  void loadLanguage(languageById(language)).catch(() => undefined); // the query reports a failure
}

function adopt(file: IndexedFile): void {
  warm(file.summary.language);
  shard.adopt(file);
}

parentPort!.on('message', (msg: WorkerRequest) => {
  if (msg.kind === 'invalidate') return shard.invalidate(msg.abs);
  if (msg.kind === 'clear') return shard.clear();
  if (msg.kind === 'adopt') return adopt(msg.file);
  if (msg.kind === 'adoptFrom') return void msg.port.on('message', adopt);
  if (msg.kind === 'cancel') return void cancelled.add(msg.id);
  const id = msg.id;
  shard
    .run(msg.job, () => cancelled.has(id))
    .finally(() => cancelled.delete(id))
    .then(
      (result) => parentPort!.postMessage({ id: msg.id, ok: true, result } satisfies WorkerReply),
      (err: Error) =>
        parentPort!.postMessage({
          id: msg.id,
          ok: false,
          error: err.message,
          tool: err.name === 'ToolError',
        } satisfies WorkerReply),
    );
});
