import './lowPriority';
import { readFileSync, statSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import { summarize } from './fileIndex';
import {
  indexedTransferables,
  versionOf,
  type IndexedFile,
  type IndexReply,
  type IndexRequest,
  type IndexThreadData,
} from './indexer';
import { languageForFile } from './languages';
import { ownerOf } from './owner';
import { parseFlat } from './treeCache';
import { walkFiles } from './walker';
import { modulesFrom } from './wasmModules';

/** The background index thread (see indexer.ts). */
const { maxFileBytes, part, parts, modules, shards, counter, done: doneBefore } = workerData as IndexThreadData;
modulesFrom(modules); // compiled WebAssembly comes from the runner's thread, shared
const indexedCount = new Int32Array(counter);

/** This thread's share of the files (by path, so a file always goes to the same thread). */
function mine(abs: string): boolean {
  return ownerOf(abs, parts) === part;
}

/** To the search shard that owns the file, directly; or back to the runner's thread (no shard threads). */
let treesSent = false;
function handOn(file: IndexedFile): void {
  const transfer = indexedTransferables(file);
  if (shards.length > 0 && !treesSent) {
    treesSent = true;
    parentPort!.postMessage({ kind: 'treesComing' } satisfies IndexReply); // the shards start only now
  }
  if (shards.length > 0) shards[ownerOf(file.abs, shards.length)].postMessage(file, transfer);
  else parentPort!.postMessage({ kind: 'file', file } satisfies IndexReply, transfer);
  Atomics.add(indexedCount, 0, 1);
}

/** Versions already indexed, so a second arrival of the same files costs only the walk. */
const done = new Map<string, string>(doneBefore);
type WorkRequest = Extract<IndexRequest, { kind: 'dir' | 'files' }>;
/** Queries running now (see BackgroundIndexer.pause), and who waits for them to end. */
let pauses = 0;
const resumed: (() => void)[] = [];
const queue: WorkRequest[] = [];
let running = false;

async function indexOne(abs: string, mtimeMs: number, size: number): Promise<void> {
  const language = languageForFile(abs);
  const version = versionOf({ mtimeMs, size });
  if (!language || size > maxFileBytes || !mine(abs) || done.get(abs) === version) return;
  done.set(abs, version);
  const buf = readFileSync(abs);
  if (buf.subarray(0, 8192).includes(0)) return;
  const source = buf.toString('utf8');
  const tree = await parseFlat(source, language);
  handOn({ abs, mtimeMs, size, utf8Bytes: buf.length, tree, summary: summarize(tree, language.id) });
}

/** Returns once no query runs and no process of the run is starting. */
async function unpaused(): Promise<void> {
  while (pauses > 0) await new Promise<void>((r) => resumed.push(r));
}

async function serve(req: WorkRequest): Promise<void> {
  await unpaused(); // the walk too waits
  const isDir = req.kind === 'dir' && statSync(req.abs, { throwIfNoEntry: false })?.isDirectory();
  const paths = req.kind === 'dir' ? [req.abs] : req.abs;
  const files = isDir
    ? (await walkFiles(paths[0], (name) => languageForFile(name) !== undefined, maxFileBytes)).files
    : paths.flatMap((abs) => {
        const st = statSync(abs, { throwIfNoEntry: false });
        return st?.isFile() ? [{ abs, mtimeMs: st.mtimeMs, size: st.size }] : [];
      });
  // From the end: a query issued meanwhile goes through the files from the start, so the two
  // meet in the middle instead of parsing the same files one after the other.
  for (const f of files.filter((f) => mine(f.abs)).reverse()) {
    await unpaused();
    try {
      await indexOne(f.abs, f.mtimeMs, f.size);
    } catch {
      // vanished, unreadable or unparsable: the query that needs it will say so
    }
    // A turn of the event loop between files lets new requests queue up.
    await new Promise((r) => setImmediate(r));
  }
}

async function drain(): Promise<void> {
  if (running) return;
  running = true;
  while (queue.length > 0) {
    const req = queue.shift()!;
    try {
      await serve(req);
    } finally {
      parentPort!.postMessage({ kind: 'idle', indexed: done.size } satisfies IndexReply);
    }
  }
  running = false;
}

parentPort!.on('message', (req: IndexRequest) => {
  if (req.kind === 'covered') {
    for (const f of req.files) if (mine(f.abs)) done.set(f.abs, versionOf(f));
    return;
  }
  if (req.kind === 'retire') {
    parentPort!.postMessage({ kind: 'retiring', done: [...done] } satisfies IndexReply);
    return;
  }
  if (req.kind === 'pause') {
    pauses++;
    return;
  }
  if (req.kind === 'resume') {
    pauses = Math.max(0, pauses - 1);
    if (pauses === 0) resumed.splice(0).forEach((r) => r());
    return;
  }
  queue.push(req);
  void drain();
});
