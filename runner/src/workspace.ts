import { closeSync, promises as fs, constants as fsc, openSync, readlinkSync, realpathSync } from 'node:fs';
import * as path from 'node:path';
import { randomBytes } from 'node:crypto';
import { ToolError } from './tool';
import { PORTABLE_STATE_DIR } from '../../protocol/src/suspend';

/**
 * The run's workspace, and the only way tools touch files in it. Every path is confined:
 * `..`, absolute paths outside the root, and symlinks that lead outside are refused, and so is
 * the reserved directory `.tether-run/` at the root, which holds the run's saved state (see
 * portable.ts) and is the runner's alone.
 */
export class Workspace {
  readonly root: string;
  /**
   * The root's real path, found once: the root is a mount (or the gateway's own directory) that
   * code in the run cannot swap for a symlink, and a stale value could only refuse more.
   */
  private realRoot: string | undefined;

  constructor(root: string) {
    this.root = path.resolve(root);
  }

  /** Lexical check: a workspace-relative (or absolute-inside) path, normalised. */
  lexical(p: string): string {
    if (typeof p !== 'string' || p.length === 0) throw new ToolError('path must be a non-empty string');
    if (p.includes('\0')) throw new ToolError('path contains a NUL byte');
    const abs = path.resolve(this.root, p);
    if (abs !== this.root && !abs.startsWith(this.root + path.sep)) {
      throw new ToolError(`path escapes the workspace: ${p}`);
    }
    if (isReserved(this.root, abs)) throw reservedError(p);
    return abs;
  }

  /** The reserved directory of the run's saved state, absolute: for the runner's own use, never a tool's. */
  get stateDir(): string {
    return path.join(this.root, PORTABLE_STATE_DIR);
  }

  /**
   * Resolves a path for use, following symlinks of every existing ancestor so a link that
   * points outside the workspace is refused even when the final file does not exist yet.
   * The kernel's realpath runs on this thread: a few system calls on the run's own disk cost
   * less than a round trip through libuv's thread pool (a futex wake and an eventfd write
   * each way), which is most of what a trivial call spends in the runner.
   */
  async resolve(p: string): Promise<string> {
    const abs = this.lexical(p);
    const realRoot = (this.realRoot ??= realpathSync.native(this.root));
    let existing = abs;
    const rest: string[] = [];
    for (;;) {
      try {
        const real = realpathSync.native(existing);
        const full = path.join(real, ...rest);
        if (full !== realRoot && !full.startsWith(realRoot + path.sep)) {
          throw new ToolError(`path leads outside the workspace through a symlink: ${p}`);
        }
        if (isReserved(realRoot, full)) throw reservedError(p);
        return full;
      } catch (err) {
        if (err instanceof ToolError) throw err;
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
        const parent = path.dirname(existing);
        if (parent === existing) throw err;
        rest.unshift(path.basename(existing));
        existing = parent;
      }
    }
  }

  /**
   * Opens an existing path read-only (`O_NONBLOCK | O_NOCTTY`: a FIFO opens at once, a
   * terminal is never taken) with the kernel resolving it once, then checks the path the
   * kernel gives for the descriptor (`/proc/self/fd`) against the root: what is checked is what
   * was opened, with no window between the check and the open, in one `readlink` where
   * `resolve` reads every component's link. Undefined when this cannot decide — the open
   * failed, /proc is not there, the file was deleted meanwhile, or its path is not inside the
   * root (a symlink leading out is opened, unread, and closed) — and then `resolve` decides and
   * says why in the words it always has.
   */
  openConfined(p: string): { fd: number; real: string } | undefined {
    const abs = this.lexical(p);
    const realRoot = (this.realRoot ??= realpathSync.native(this.root));
    let fd: number;
    try {
      fd = openSync(abs, fsc.O_RDONLY | fsc.O_NONBLOCK | fsc.O_NOCTTY);
    } catch {
      return undefined;
    }
    let real: string | undefined;
    try {
      real = readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      real = undefined;
    }
    if (
      real !== undefined &&
      (real === realRoot || real.startsWith(realRoot + path.sep)) &&
      !isReserved(realRoot, real) &&
      !real.endsWith(' (deleted)')
    )
      return { fd, real };
    closeSync(fd);
    return undefined;
  }

  relative(abs: string): string {
    const rel = path.relative(this.root, abs);
    return rel === '' ? '.' : rel.split(path.sep).join('/');
  }

  async readText(p: string): Promise<string> {
    return readRegularText(await this.resolve(p), p);
  }

  async exists(p: string): Promise<boolean> {
    try {
      await fs.access(await this.resolve(p), fsc.F_OK);
      return true;
    } catch {
      return false;
    }
  }

  /** Atomic write: a temp file beside the target, then rename. Keeps an existing file's mode. */
  async writeAtomic(p: string, content: string | Buffer): Promise<string> {
    const abs = await this.resolve(p);
    await fs.mkdir(path.dirname(abs), { recursive: true });
    let mode: number | undefined;
    try {
      mode = (await fs.stat(abs)).mode & 0o7777;
    } catch {
      mode = undefined;
    }
    const tmp = path.join(path.dirname(abs), `.${path.basename(abs)}.tether-${randomBytes(6).toString('hex')}.tmp`);
    try {
      await fs.writeFile(tmp, content, { mode: mode ?? 0o644, flag: 'wx' });
      await fs.rename(tmp, abs);
    } catch (err) {
      await fs.rm(tmp, { force: true });
      throw err;
    }
    return abs;
  }
}

/** Whether an absolute path inside `root` is the reserved state directory or under it. */
export function isReserved(root: string, abs: string): boolean {
  const reserved = path.join(root, PORTABLE_STATE_DIR);
  return abs === reserved || abs.startsWith(reserved + path.sep);
}

function reservedError(p: string): ToolError {
  return new ToolError(
    `${p} is inside ${PORTABLE_STATE_DIR}/, which holds the run's saved state and is reserved: no tool reads or writes it`,
  );
}

/** Largest text file the tools load whole. */
export const MAX_TEXT_FILE_BYTES = 32 * 1024 * 1024;

/**
 * Reads a regular text file. FIFOs and devices are refused (they would block a thread or
 * never end), and so are files too large to edit in memory.
 */
export async function readRegularText(abs: string, shown: string = abs): Promise<string> {
  const st = await fs.stat(abs);
  if (st.isDirectory()) throw new ToolError(`${shown} is a directory`);
  if (!st.isFile()) throw new ToolError(`${shown} is not a regular file`);
  if (st.size > MAX_TEXT_FILE_BYTES)
    throw new ToolError(`${shown} is ${st.size} bytes, above the ${MAX_TEXT_FILE_BYTES}-byte limit for text tools`);
  return fs.readFile(abs, 'utf8');
}
