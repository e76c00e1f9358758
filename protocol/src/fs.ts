/**
 * The fs family: the workspace's files as a file system (stat, list, make directories, move,
 * remove, read and write whole files, watch a directory), outside tool calls. Every path is
 * workspace-relative or absolute inside the workspace and is confined there by the runner.
 * Writes are atomic (temp file + rename) and never follow a link out of the workspace.
 */
import { FamilyCommand, RunEventType } from './run';

export const FS_FAMILY = 'fs';

export type FsEntryType = 'file' | 'dir' | 'symlink' | 'other';

export interface FsEntry {
  name: string;
  /** Absolute path inside the sandbox. */
  path: string;
  type: FsEntryType;
  size: number;
  /** The permission bits and type as `stat` reports them (st_mode). */
  mode: number;
  owner: string;
  group: string;
  /** Modification time, ms since the epoch. */
  mtimeMs: number;
  /** Where a symlink points, as stored. */
  symlinkTarget?: string;
}

export interface FsRefusal {
  ok: false;
  code: 'invalid' | 'not_found' | 'exists' | 'not_dir' | 'is_dir' | 'too_large' | 'limit' | 'failed';
  message: string;
}

export type FsReply<T> = ({ ok: true } & T) | FsRefusal;

export namespace FsStatCommand {
  export const type = new FamilyCommand<{ path: string }, FsReply<{ entry: FsEntry }>>(FS_FAMILY, 'stat');
}

/** The most entries one `list` answers; past it the reply says `truncated`. */
export const FS_LIST_MAX_ENTRIES = 10_000;

/**
 * Entries of a directory; `depth` 1 lists its children only. Symlinks are listed, not followed.
 * `truncated` says the listing stopped at FS_LIST_MAX_ENTRIES.
 */
export namespace FsListCommand {
  export const type = new FamilyCommand<
    { path: string; depth: number },
    FsReply<{ entries: FsEntry[]; truncated?: boolean }>
  >(FS_FAMILY, 'list');
}

/** Makes a directory and its parents; `created` is false when it was already there. */
export namespace FsMakeDirCommand {
  export const type = new FamilyCommand<{ path: string }, FsReply<{ entry: FsEntry; created: boolean }>>(
    FS_FAMILY,
    'mkdir',
  );
}

export namespace FsMoveCommand {
  export const type = new FamilyCommand<{ from: string; to: string }, FsReply<{ entry: FsEntry }>>(FS_FAMILY, 'move');
}

/** Removes a file, or a directory with everything in it. */
export namespace FsRemoveCommand {
  export const type = new FamilyCommand<{ path: string }, FsReply<Record<string, never>>>(FS_FAMILY, 'remove');
}

/** A whole file, base64, refused past `maxBytes`. */
export namespace FsReadCommand {
  export const type = new FamilyCommand<{ path: string; maxBytes: number }, FsReply<{ data: string; size: number }>>(
    FS_FAMILY,
    'read',
  );
}

/** Writes a whole file (base64), making its parent directories; atomic. */
export namespace FsWriteCommand {
  export const type = new FamilyCommand<{ path: string; data: string }, FsReply<{ entry: FsEntry }>>(
    FS_FAMILY,
    'write',
  );
}

export interface FsWatchParams {
  path: string;
  recursive: boolean;
}

/**
 * Starts watching a directory; events follow as run events with the watch's id. A run holds at
 * most 16 watches at once (refusal `limit`); one that ends by itself says so in its last event.
 */
export namespace FsWatchCommand {
  export const type = new FamilyCommand<FsWatchParams, FsReply<{ watchId: string }>>(FS_FAMILY, 'watch');
}

export namespace FsUnwatchCommand {
  export const type = new FamilyCommand<{ watchId: string }, FsReply<Record<string, never>>>(FS_FAMILY, 'unwatch');
}

export type FsChange = 'create' | 'write' | 'remove' | 'rename' | 'chmod';

export interface FsWatchEventPayload {
  watchId: string;
  /** Changes in the order they happened; `name` is relative to the watched directory. */
  changes: { type: FsChange; name: string }[];
  /** Changes that were not kept because the watch's queue was full (bounded). */
  dropped?: number;
  /** The watch ended (its directory went away, or it failed); no event of it follows. */
  ended?: string;
}

/** runner → gateway: changes under a watched directory, batched. */
export namespace FsWatchEvent {
  export const type = new RunEventType<FsWatchEventPayload>('fs.watch');
}
