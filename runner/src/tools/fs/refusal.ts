import type { FsRefusal } from '../../../../protocol/src/fs';
import { logger } from '../../log';
import { ToolError } from '../../tool';

/** A refusal thrown inside the family and answered as it is. */
export class FsFailure extends Error {
  constructor(
    readonly code: FsRefusal['code'],
    message: string,
  ) {
    super(message);
  }
}

const ERRNO: Record<string, [FsRefusal['code'], string]> = {
  ENOENT: ['not_found', 'no such file or directory'],
  EEXIST: ['exists', 'already exists'],
  ENOTEMPTY: ['exists', 'the directory is not empty'],
  ENOTDIR: ['not_dir', 'not a directory'],
  EISDIR: ['is_dir', 'is a directory'],
  EINVAL: ['invalid', 'invalid operation (a directory cannot move into itself)'],
  ELOOP: ['invalid', 'too many levels of symbolic links'],
  ENAMETOOLONG: ['invalid', 'file name too long'],
  EACCES: ['failed', 'permission denied'],
  EPERM: ['failed', 'operation not permitted'],
  ENOSPC: ['failed', 'no space left on the device'],
  EROFS: ['failed', 'read-only file system'],
  EBUSY: ['failed', 'the file is busy'],
};

/**
 * What a command answers for whatever it threw: its refusal; a confinement refusal of the
 * workspace (ToolError) as `invalid`; an errno by its kind, naming the path as the caller gave it.
 */
export function fsRefusalOf(err: unknown, shown: string, command: string): FsRefusal {
  if (err instanceof FsFailure) return { ok: false, code: err.code, message: err.message };
  if (err instanceof ToolError) return { ok: false, code: 'invalid', message: err.message };
  const code = (err as NodeJS.ErrnoException)?.code;
  const known = code ? ERRNO[code] : undefined;
  if (known) return { ok: false, code: known[0], message: `${shown}: ${known[1]}` };
  const message = err instanceof Error ? err.message : String(err);
  logger.warn({ command, err: message }, 'fs command failed');
  return { ok: false, code: 'failed', message: `${shown}: ${message}` };
}
