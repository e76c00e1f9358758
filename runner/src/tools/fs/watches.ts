import { randomUUID } from 'node:crypto';
import * as path from 'node:path';
import type { FsWatchEventPayload } from '../../../../protocol/src/fs';
import type { FsPaths } from './paths';
import { FsFailure } from './refusal';
import { DirWatch } from './watch';

/** Watches one run may hold at once. */
export const MAX_WATCHES = 16;
/** The temp files of the runner's own atomic writes (Workspace.writeAtomic, commitChanges): never reported. */
const RUNNER_TEMP = /^\..+\.tether-[0-9a-f]{12}\.tmp$/;

/** The watches of one run, by id: at most MAX_WATCHES, all closed when the run stops. */
export class WatchSet {
  private readonly watches = new Map<string, DirWatch>();
  /** Watches starting, counted against the limit before they have an id. */
  private starting = 0;

  constructor(
    private readonly paths: FsPaths,
    private readonly send: (payload: FsWatchEventPayload) => void,
  ) {}

  async watch(p: string, recursive: boolean): Promise<{ watchId: string }> {
    if (this.watches.size + this.starting >= MAX_WATCHES)
      throw new FsFailure('limit', `${MAX_WATCHES} watches are already open in this run: unwatch one first`);
    this.starting++;
    try {
      const root = await this.paths.follow(p);
      const id = randomUUID();
      const w = new DirWatch({
        id,
        root,
        recursive,
        hidden: (real) => this.paths.reserved(real) || RUNNER_TEMP.test(path.basename(real)),
        send: this.send,
        ended: () => this.watches.delete(id),
      });
      try {
        await w.start();
      } catch (err) {
        w.close();
        if (err instanceof FsFailure) throw new FsFailure(err.code, err.message.replace(root, p));
        throw err;
      }
      this.watches.set(id, w);
      return { watchId: id };
    } finally {
      this.starting--;
    }
  }

  unwatch(watchId: string): void {
    const w = this.watches.get(watchId);
    if (!w) throw new FsFailure('not_found', `no watch ${watchId} in this run`);
    this.watches.delete(watchId);
    w.close();
  }

  closeAll(): void {
    for (const w of this.watches.values()) w.close();
    this.watches.clear();
  }
}
