import { closeSync, promises as fs, fstat as fstatCb, constants as fsc, openSync, read as readCb } from 'node:fs';
import { promisify } from 'node:util';
import * as path from 'node:path';
import type { FsEntry } from '../../../../protocol/src/fs';
import { entryOf } from './entries';
import { listTree } from './list';
import type { Owners } from './owners';
import type { FsPaths } from './paths';
import { FsFailure } from './refusal';

const fstat = promisify(fstatCb);
const readAt = promisify(readCb);

/** A path parameter, checked. */
export function pathArg(v: unknown, what = 'path'): string {
  if (typeof v !== 'string' || v === '') throw new FsFailure('invalid', `${what} must be a non-empty string`);
  return v;
}

/** Base64 content; anything else is refused rather than half decoded. */
export function base64Arg(v: unknown): Buffer {
  if (typeof v !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(v) || v.length % 4 === 1)
    throw new FsFailure('invalid', 'data must be base64');
  return Buffer.from(v, 'base64');
}

/** The file operations of one run's workspace; every path goes through FsPaths. */
export class FsOps {
  constructor(
    private readonly paths: FsPaths,
    private readonly owners: Owners,
  ) {}

  private entry(real: string): Promise<FsEntry> {
    return entryOf(real, this.paths, this.owners);
  }

  async stat(p: string): Promise<{ entry: FsEntry }> {
    return { entry: await this.entry(await this.paths.noFollow(p)) };
  }

  async list(p: string, depth: unknown): Promise<{ entries: FsEntry[]; truncated?: boolean }> {
    const levels = depth ?? 1;
    if (!Number.isInteger(levels) || (levels as number) < 1)
      throw new FsFailure('invalid', 'depth must be a whole number of at least 1');
    const dir = await this.paths.follow(p);
    const st = await fs.stat(dir);
    if (!st.isDirectory()) throw new FsFailure('not_dir', `${p} is not a directory`);
    const { entries, truncated } = await listTree(dir, levels as number, this.paths, this.owners);
    return truncated ? { entries, truncated } : { entries };
  }

  async mkdir(p: string): Promise<{ entry: FsEntry; created: boolean }> {
    const dir = await this.paths.follow(p);
    const st = await fs.lstat(dir).catch(() => undefined);
    if (st) {
      if (!st.isDirectory()) throw new FsFailure('exists', `${p} exists and is not a directory`);
      return { entry: await this.entry(dir), created: false };
    }
    try {
      const first = await fs.mkdir(dir, { recursive: true, mode: 0o755 });
      return { entry: await this.entry(dir), created: first !== undefined };
    } catch (err) {
      // Something on the way is a file.
      if ((err as NodeJS.ErrnoException).code === 'EEXIST' || (err as NodeJS.ErrnoException).code === 'ENOTDIR')
        throw new FsFailure('not_dir', `a parent of ${p} is not a directory`);
      throw err;
    }
  }

  async move(from: string, to: string): Promise<{ entry: FsEntry }> {
    const source = await this.paths.noFollow(from);
    const target = await this.paths.noFollow(to);
    const root = this.paths.realRoot;
    if (source === root) throw new FsFailure('invalid', 'the workspace root cannot be moved');
    if (target === root) throw new FsFailure('exists', 'the workspace root cannot be replaced');
    await fs.lstat(source).catch((err) => {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new FsFailure('not_found', `${from} does not exist`);
      throw err;
    });
    if (target.startsWith(source + path.sep)) throw new FsFailure('invalid', `${from} cannot move into itself`);
    await this.parentsOf(target, to);
    await fs.rename(source, target);
    return { entry: await this.entry(target) };
  }

  async remove(p: string): Promise<Record<string, never>> {
    const real = await this.paths.noFollow(p);
    if (real === this.paths.realRoot) throw new FsFailure('invalid', 'the workspace root cannot be removed');
    await fs.lstat(real);
    await fs.rm(real, { recursive: true, force: false });
    return {};
  }

  async read(p: string, maxBytes: unknown): Promise<{ data: string; size: number }> {
    if (!Number.isInteger(maxBytes) || (maxBytes as number) < 0)
      throw new FsFailure('invalid', 'maxBytes must be a whole number of bytes');
    const max = maxBytes as number;
    // The kernel opens what was checked (Workspace.openConfined); otherwise resolve says why not.
    const fd =
      this.paths.workspace.openConfined(p)?.fd ??
      openSync(await this.paths.follow(p), fsc.O_RDONLY | fsc.O_NONBLOCK | fsc.O_NOCTTY);
    try {
      const st = await fstat(fd);
      if (st.isDirectory()) throw new FsFailure('is_dir', `${p} is a directory`);
      if (!st.isFile()) throw new FsFailure('invalid', `${p} is not a regular file`);
      if (st.size > max) throw new FsFailure('too_large', `${p} is ${st.size} bytes, above the ${max}-byte limit`);
      // Read one byte past the limit: a file that grew meanwhile is refused, not cut.
      const buf = Buffer.alloc(Math.min(st.size, max) + 1);
      let got = 0;
      while (got < buf.length) {
        const { bytesRead } = await readAt(fd, buf, got, buf.length - got, got);
        if (bytesRead === 0) break;
        got += bytesRead;
      }
      if (got > max) throw new FsFailure('too_large', `${p} is larger than the ${max}-byte limit`);
      return { data: buf.subarray(0, got).toString('base64'), size: got };
    } finally {
      closeSync(fd);
    }
  }

  async write(p: string, data: Buffer): Promise<{ entry: FsEntry }> {
    const target = await this.paths.follow(p);
    await this.parentsOf(target, p);
    const st = await fs.lstat(target).catch(() => undefined);
    if (st?.isDirectory()) throw new FsFailure('is_dir', `${p} is a directory`);
    // Temp file beside the target, then rename; a new file is 0644.
    const written = await this.paths.workspace.writeAtomic(p, data);
    return { entry: await this.entry(written) };
  }

  /** Makes a target's parent directories; a file on the way is refused as not a directory. */
  private async parentsOf(target: string, shown: string): Promise<void> {
    try {
      await fs.mkdir(path.dirname(target), { recursive: true, mode: 0o755 });
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EEXIST' || code === 'ENOTDIR')
        throw new FsFailure('not_dir', `a parent of ${shown} is not a directory`);
      throw err;
    }
  }
}
