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

  settle(e: StagedEdit, state: Exclude<EditState, 'pending'>): void {
    e.state = state;
    e.files = [];
  }
}
