import { promises as fs, renameSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';

const ID = /^[A-Za-z0-9_.-]{1,128}$/;

/**
 * Small JSON records in the gateway's state directory, one file per id, outside every run's
 * reach. Each is written whole (temp file, then rename), so a restart finds either no record
 * or a complete one; what cannot be read as one is treated as absent.
 */
export class RecordDir<T> {
  private made?: Promise<unknown>;

  /** `valid` decides whether what a file holds is a record at all. */
  constructor(
    readonly dir: string,
    private readonly valid: (r: unknown) => r is T,
  ) {}

  private file(id: string): string {
    if (!ID.test(id)) throw new Error(`not a record id: ${JSON.stringify(id)}`);
    return path.join(this.dir, `${id}.json`);
  }

  async write(id: string, record: T, opts: { durable?: boolean } = {}): Promise<void> {
    // Once per store: a write can be on CreateRun's path.
    this.made ??= fs.mkdir(this.dir, { recursive: true, mode: 0o700 }).catch((err) => {
      this.made = undefined;
      throw err;
    });
    await this.made;
    const final = this.file(id);
    const tmp = `${final}.${process.pid}.tmp`;
    // The rename makes the record whole against a gateway crash; each store says what a host
    // crash would cost without an fsync. Synchronous: a few hundred bytes cost microseconds,
    // where four trips through the thread pool cost milliseconds on a busy machine.
    writeFileSync(tmp, JSON.stringify(record), { mode: 0o600, flush: opts.durable === true });
    renameSync(tmp, final);
  }

  /** The record for this id, or undefined when there is none (or it cannot be read). */
  async read(id: string): Promise<T | undefined> {
    try {
      const r: unknown = JSON.parse(await fs.readFile(this.file(id), 'utf8'));
      return this.valid(r) ? r : undefined;
    } catch {
      return undefined;
    }
  }

  async remove(id: string): Promise<void> {
    await fs.rm(this.file(id), { force: true });
  }

  /** Ids that have a record (temp files of an interrupted write are removed). */
  async list(): Promise<string[]> {
    const names = await fs.readdir(this.dir).catch(() => [] as string[]);
    const ids: string[] = [];
    for (const n of names) {
      if (n.endsWith('.tmp')) await fs.rm(path.join(this.dir, n), { force: true });
      else if (n.endsWith('.json')) ids.push(n.slice(0, -'.json'.length));
    }
    return ids;
  }
}
