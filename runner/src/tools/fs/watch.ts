import { watch, lstatSync, promises as fs, type FSWatcher } from 'node:fs';
import * as path from 'node:path';
import type { FsChange, FsWatchEventPayload } from '../../../../protocol/src/fs';
import { FsFailure } from './refusal';

/** Changes of one watch gathered before they are sent together. */
export const WATCH_BATCH_MS = 20;
/** Changes one watch holds unsent; past them they are only counted (`dropped`). */
export const WATCH_MAX_PENDING = 1000;
/** Directories one recursive watch follows (an inotify watch each). */
export const WATCH_MAX_DIRS = 10_000;

interface WatchedDir {
  watcher: FSWatcher;
  dev: number;
  ino: number;
  children: Set<string>;
  parent: string | undefined;
}

export interface DirWatchOptions {
  id: string;
  /** The directory's real path. */
  root: string;
  recursive: boolean;
  /** Paths never reported nor followed (the reserved state directory). */
  hidden: (real: string) => boolean;
  send: (payload: FsWatchEventPayload) => void;
  /** Told once when the watch ended by itself (its directory went away, or it failed). */
  ended: () => void;
}

/**
 * Watches a directory (and, recursive, every directory under it) through inotify: one
 * non-recursive `fs.watch` per directory, added as directories appear and dropped as they go,
 * so a change by any process of the run is seen. inotify names only what changed: a `rename`
 * is a creation when the path exists afterwards and a removal when it does not; a `change`
 * (contents or attributes) is a write. Changes are sent in batches every WATCH_BATCH_MS; at
 * most WATCH_MAX_PENDING wait at once, the rest are counted in `dropped`.
 */
export class DirWatch {
  private readonly dirs = new Map<string, WatchedDir>();
  private pending: { type: FsChange; name: string }[] = [];
  /** The last change of each name in the pending batch, to fold repeats. */
  private lastOf = new Map<string, FsChange>();
  private dropped = 0;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  /** Until the watch answered its start, an end is its refusal and nothing is sent. */
  private started = false;
  private startFailure: FsFailure | undefined;

  constructor(private readonly o: DirWatchOptions) {}

  get id(): string {
    return this.o.id;
  }

  /** Starts watching; throws when the directory cannot be watched. */
  async start(): Promise<void> {
    const st = lstatSync(this.o.root, { throwIfNoEntry: false });
    if (!st) throw new FsFailure('not_found', `${this.o.root} does not exist`);
    if (!st.isDirectory()) throw new FsFailure('not_dir', `${this.o.root} is not a directory`);
    const failure = this.add(this.o.root, undefined);
    if (failure) throw failure;
    if (this.o.recursive) await this.scan(this.o.root, false);
    if (this.closed)
      throw this.startFailure ?? new FsFailure('failed', `${this.o.root} went away while its watch started`);
    this.started = true;
  }

  /** Stops watching; nothing more is sent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.timer);
    for (const d of this.dirs.values()) d.watcher.close();
    this.dirs.clear();
    this.pending = [];
    this.lastOf.clear();
  }

  /** Watches one directory; a failure that ends the watch is returned (and, once started, sent). */
  private add(dir: string, parent: string | undefined): FsFailure | undefined {
    if (this.closed || this.dirs.has(dir) || this.o.hidden(dir)) return undefined;
    if (this.dirs.size >= WATCH_MAX_DIRS)
      return this.fail('limit', `more than ${WATCH_MAX_DIRS} directories under the watched one: watch fewer`);
    const st = lstatSync(dir, { throwIfNoEntry: false });
    if (!st?.isDirectory()) return undefined;
    let watcher: FSWatcher;
    try {
      watcher = watch(dir, { persistent: false }, (type, name) => this.event(dir, type, name));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOSPC' || code === 'EMFILE')
        return this.fail('limit', "the sandbox's limit of inotify watches was reached: watch fewer directories");
      if (dir === this.o.root) return new FsFailure('failed', `cannot watch ${dir}: ${(err as Error).message}`);
      return undefined; // gone meanwhile, or unreadable: not watched
    }
    watcher.on('error', (err) => {
      if (dir === this.o.root) this.end(`the watch failed: ${err.message}`);
      else this.forget(dir);
    });
    this.dirs.set(dir, { watcher, dev: st.dev, ino: st.ino, children: new Set(), parent });
    if (parent) this.dirs.get(parent)?.children.add(dir);
    return undefined;
  }

  private fail(code: 'limit' | 'failed', why: string): FsFailure {
    const failure = new FsFailure(code, why);
    this.startFailure ??= failure;
    this.end(why);
    return failure;
  }

  /**
   * Watches the directories under `dir`; `announce` reports what is found as created (a
   * directory that just appeared may hold what was made in it before it was watched).
   */
  private async scan(dir: string, announce: boolean): Promise<void> {
    const stack = [dir];
    while (stack.length > 0 && !this.closed) {
      const current = stack.pop()!;
      let entries;
      try {
        entries = await fs.readdir(current, { withFileTypes: true });
      } catch {
        continue;
      }
      for (const e of entries) {
        if (this.closed) return;
        const child = path.join(current, e.name);
        if (this.o.hidden(child)) continue;
        if (announce) this.push('create', child);
        if (e.isDirectory() && this.dirs.has(current) && !this.dirs.has(child)) {
          if (this.add(child, current)) return;
          if (this.dirs.has(child)) stack.push(child);
        }
      }
    }
  }

  private event(dir: string, type: string, name: string | Buffer | null): void {
    if (this.closed) return;
    const watched = this.dirs.get(dir);
    if (!watched) return;
    if (name === null || name === undefined) return;
    const base = String(name);
    // inotify reports what happens to the directory itself under its own name.
    if (base === path.basename(dir) && !this.stillThere(dir, watched)) {
      if (dir === this.o.root) this.end('the watched directory was removed');
      else this.forget(dir);
      return;
    }
    const abs = path.join(dir, base);
    if (this.o.hidden(abs)) return;
    const st = lstatSync(abs, { throwIfNoEntry: false });
    if (type === 'change') {
      if (st) this.push('write', abs);
      return;
    }
    if (!st) {
      this.push('remove', abs);
      this.forget(abs);
      return;
    }
    this.push('create', abs);
    if (this.o.recursive && st.isDirectory() && !this.dirs.has(abs)) {
      if (this.add(abs, dir)) return;
      if (this.dirs.has(abs)) void this.scan(abs, true);
    }
  }

  private stillThere(dir: string, watched: WatchedDir): boolean {
    const st = lstatSync(dir, { throwIfNoEntry: false });
    return !!st && st.isDirectory() && st.ino === watched.ino && st.dev === watched.dev;
  }

  /** Stops watching a directory and everything under it. */
  private forget(dir: string): void {
    const d = this.dirs.get(dir);
    if (!d || dir === this.o.root) return;
    const stack = [dir];
    while (stack.length > 0) {
      const current = stack.pop()!;
      const w = this.dirs.get(current);
      if (!w) continue;
      w.watcher.close();
      this.dirs.delete(current);
      stack.push(...w.children);
    }
    if (d.parent) this.dirs.get(d.parent)?.children.delete(dir);
  }

  private push(type: FsChange, abs: string): void {
    const name = path.relative(this.o.root, abs);
    const last = this.lastOf.get(name);
    // Repeats fold: a write right after the creation or another write says nothing new.
    if (last === type || (type === 'write' && last === 'create')) return;
    if (this.pending.length >= WATCH_MAX_PENDING) this.dropped++;
    else {
      this.pending.push({ type, name });
      this.lastOf.set(name, type);
    }
    this.timer ??= setTimeout(() => this.flush(), WATCH_BATCH_MS);
  }

  private flush(ended?: string): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.pending.length === 0 && this.dropped === 0 && ended === undefined) return;
    const payload: FsWatchEventPayload = { watchId: this.o.id, changes: this.pending };
    if (this.dropped > 0) payload.dropped = this.dropped;
    if (ended !== undefined) payload.ended = ended;
    this.pending = [];
    this.lastOf = new Map();
    this.dropped = 0;
    this.o.send(payload);
  }

  /** Ends the watch by itself: what is pending goes out with the reason, and nothing after. */
  private end(why: string): void {
    if (this.closed) return;
    if (!this.started) {
      this.startFailure ??= new FsFailure('failed', why);
      this.close();
      return;
    }
    this.flush(why);
    this.close();
    this.o.ended();
  }
}
