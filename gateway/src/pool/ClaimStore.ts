import { promises as fs, renameSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import type { RunSpec } from '../runs/RunRecord';

/** Who a claimed pooled sandbox belongs to: what its labels would say had it been made for it. */
export interface ClaimRecord {
  runId: string;
  tenant: string;
  spec: RunSpec;
  createdAt: string;
}

const ID = /^[A-Za-z0-9_.-]{1,128}$/;

/**
 * A claimed sandbox's run identity, kept in the gateway's state directory because a container's
 * labels are fixed at creation. Outside the run's reach: the run can write its workspace, not
 * this. One file per sandbox, written whole (temp file, then rename) before CreateRun answers,
 * so a restart finds either no claim (an idle pooled sandbox) or a complete one.
 */
export class ClaimStore {
  private made?: Promise<unknown>;

  constructor(readonly dir: string) {}

  private file(sandboxId: string): string {
    if (!ID.test(sandboxId)) throw new Error(`not a sandbox id: ${JSON.stringify(sandboxId)}`);
    return path.join(this.dir, `${sandboxId}.json`);
  }

  async write(sandboxId: string, record: ClaimRecord): Promise<void> {
    // Once per gateway: a claim is on CreateRun's path.
    this.made ??= fs.mkdir(this.dir, { recursive: true, mode: 0o700 }).catch((err) => {
      this.made = undefined;
      throw err;
    });
    await this.made;
    const final = this.file(sandboxId);
    const tmp = `${final}.${process.pid}.tmp`;
    // No fsync: the rename makes the record whole against a gateway crash, and a host crash
    // takes the claimed container with it, so a lost record has nothing left to describe.
    // Synchronous: a few hundred bytes cost microseconds, where four trips through the thread
    // pool cost milliseconds on a busy machine, on every claim.
    writeFileSync(tmp, JSON.stringify(record), { mode: 0o600 });
    renameSync(tmp, final);
  }

  /** The claim on this sandbox, or undefined when there is none (or it cannot be read). */
  async read(sandboxId: string): Promise<ClaimRecord | undefined> {
    try {
      const r = JSON.parse(await fs.readFile(this.file(sandboxId), 'utf8')) as ClaimRecord;
      return r &&
        typeof r.runId === 'string' &&
        typeof r.tenant === 'string' &&
        r.spec &&
        typeof r.createdAt === 'string'
        ? r
        : undefined;
    } catch {
      return undefined;
    }
  }

  async remove(sandboxId: string): Promise<void> {
    await fs.rm(this.file(sandboxId), { force: true });
  }

  /** Sandbox ids that have a claim file (temp files of an interrupted write are removed). */
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
