import * as path from 'node:path';
import { ToolError } from '../../tool';
import { count } from './words';

export interface StagedFile {
  abs: string;
  rel: string;
  /** The content the rewrite was computed from; accept requires the file still to hold it. */
  expected: string;
  next: string;
  replacements: number;
}

/** The run's staged edits as a pause writes them. */
export interface PortableEdits {
  counter: number;
  edits: { id: string; ageMs: number; state: EditState; files: Omit<StagedFile, 'abs'>[] }[];
}

export type EditState = 'pending' | 'accepted' | 'discarded' | 'rejected';

export interface StagedEdit {
  id: string;
  createdAt: number;
  state: EditState;
  files: StagedFile[];
}

/**
 * The run's staged rewrites, `edit_1`, `edit_2`, … A pending edit holds every file's old and
 * new content until it is resolved or expires; resolved ones keep only their state, so a
 * second resolve gets a clear answer.
 */
export class StagedEdits {
  private readonly edits = new Map<string, StagedEdit>();
  private counter = 0;

  constructor(
    private readonly ttlMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  stage(files: StagedFile[]): StagedEdit {
    this.sweep();
    const edit: StagedEdit = { id: `edit_${++this.counter}`, createdAt: this.now(), state: 'pending', files };
    this.edits.set(edit.id, edit);
    return edit;
  }

  private expired(e: StagedEdit): boolean {
    return e.state === 'pending' && this.now() - e.createdAt > this.ttlMs;
  }

  /** Frees the contents of pending edits that have expired. */
  private sweep(): void {
    for (const e of this.edits.values()) if (this.expired(e)) e.files = [];
  }

  /** A pending edit, or a ToolError saying why it cannot be resolved. */
  pending(id: string): StagedEdit {
    const e = this.edits.get(id);
    if (!e) {
      const open = [...this.edits.values()].filter((x) => x.state === 'pending' && !this.expired(x)).map((x) => x.id);
      throw new ToolError(
        `unknown edit_id "${id}"; ${open.length ? `pending edits: ${open.join(', ')}` : 'no edits are pending in this run'}`,
      );
    }
    if (this.expired(e)) {
      e.files = [];
      throw new ToolError(
        `${id} expired (staged edits live ${count(Math.round(this.ttlMs / 60000), 'minute')}); run ast_edit again`,
      );
    }
    if (e.state !== 'pending')
      throw new ToolError(`${id} was already resolved (${e.state}); run ast_edit again for a new change`);
    return e;
  }

  /**
   * The edits as data for a pause: files by workspace-relative path, and each edit's age rather
   * than its start, so the time a run spends paused does not count against the edits' life.
   */
  toPortable(): PortableEdits {
    this.sweep();
    const now = this.now();
    return {
      counter: this.counter,
      edits: [...this.edits.values()].map((e) => ({
        id: e.id,
        ageMs: now - e.createdAt,
        state: e.state,
        files: e.files.map(({ rel, expected, next, replacements }) => ({ rel, expected, next, replacements })),
      })),
    };
  }

  /** Takes back what toPortable gave, in a run whose workspace is at `root`; returns the pending count. */
  fromPortable(saved: PortableEdits, root: string): number {
    const now = this.now();
    this.counter = Math.max(this.counter, saved.counter);
    for (const e of saved.edits) {
      this.edits.set(e.id, {
        id: e.id,
        createdAt: now - e.ageMs,
        state: e.state,
        files: e.files.map((f) => ({ ...f, abs: path.join(root, ...f.rel.split('/')) })),
      });
    }
    return saved.edits.filter((e) => e.state === 'pending' && e.files.length > 0).length;
  }

  settle(e: StagedEdit, state: Exclude<EditState, 'pending'>): void {
    e.state = state;
    e.files = [];
  }
}
