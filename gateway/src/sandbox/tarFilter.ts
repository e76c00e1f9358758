import { createWriteStream, promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as tarStream from 'tar-stream';

export interface ConfineOptions {
  /** Workspace-relative directory the entries are placed under ("" for the root). */
  prefix: string;
  uid: number;
  gid: number;
}

/**
 * Re-packs an untrusted tar stream so that it can be unpacked at the workspace root and stays
 * inside it: every entry is placed under `prefix`; absolute names, `..`, links leaving the
 * workspace and anything but files, directories and links are refused; owners become the
 * run's user and modes lose setuid/setgid and group/other write bits.
 *
 * The returned stream errors (and the extraction must then be abandoned) on the first entry
 * refused, so that a bad archive is not half applied silently.
 */
export function confineTar(input: Readable, opts: ConfineOptions): Readable {
  const extract = tarStream.extract();
  const pack = tarStream.pack();
  const prefix = opts.prefix ? path.posix.normalize(opts.prefix).replace(/\/$/, '') : '';
  if (prefix === '..' || prefix.startsWith('../') || path.posix.isAbsolute(prefix))
    throw new Error(`path escapes the workspace: ${opts.prefix}`);

  let failed = false;
  const fail = (err: Error) => {
    if (failed) return;
    failed = true;
    pack.destroy(err);
    extract.destroy();
    input.destroy();
  };

  // Every directory on the way to an entry is sent first, owned by the run's user: the
  // engine would otherwise create missing parents owned by root.
  const sent = new Set<string>();
  const parents = (name: string) => {
    const parts = name.split('/').slice(0, -1);
    parts.forEach((_, i) => {
      const dir = parts.slice(0, i + 1).join('/');
      if (sent.has(dir)) return;
      sent.add(dir);
      pack.entry({ name: dir, type: 'directory', mode: 0o755, uid: opts.uid, gid: opts.gid });
    });
  };
  if (prefix) parents(`${prefix}/x`);

  extract.on('entry', (header, stream, next) => {
    stream.on('error', () => undefined);
    const refused = check(header, prefix);
    if (refused) {
      stream.resume();
      return fail(new Error(refused));
    }
    const name = path.posix.join(prefix, path.posix.normalize(header.name)).replace(/\/$/, '');
    parents(name);
    if (header.type === 'directory') {
      if (sent.has(name)) {
        stream.resume();
        return stream.on('end', next);
      }
      sent.add(name);
    }
    const out: Partial<tarStream.Header> & { name: string } = {
      name,
      type: header.type,
      size: header.type === 'file' ? header.size : 0,
      mode: (header.mode ?? (header.type === 'directory' ? 0o755 : 0o644)) & 0o755,
      mtime: header.mtime,
      uid: opts.uid,
      gid: opts.gid,
    };
    if (header.type === 'symlink') out.linkname = header.linkname ?? '';
    if (header.type === 'link') out.linkname = path.posix.join(prefix, path.posix.normalize(header.linkname ?? ''));
    const entry = pack.entry(out as tarStream.Header, (err) => (err ? fail(err) : next()));
    stream.pipe(entry);
  });
  extract.on('finish', () => pack.finalize());
  extract.on('error', fail);
  input.on('error', fail);
  input.pipe(extract);
  return pack as unknown as Readable;
}

/** Why an entry is refused, or undefined when it is fine. */
function check(header: Pick<tarStream.Header, 'name' | 'type' | 'linkname'>, prefix: string): string | undefined {
  const name = header.name;
  const type = header.type ?? 'file';
  if (type !== 'file' && type !== 'directory' && type !== 'symlink' && type !== 'link')
    return `entry type ${type} refused: ${name}`;
  if (name.includes('\0')) return 'entry name contains a NUL byte';
  if (path.posix.isAbsolute(name)) return `absolute entry refused: ${name}`;
  const norm = path.posix.normalize(name);
  if (norm === '..' || norm.startsWith('../')) return `entry leaves the workspace: ${name}`;
  if (type === 'symlink' || type === 'link') {
    const link = header.linkname ?? '';
    if (path.posix.isAbsolute(link)) return `absolute link refused: ${name} -> ${link}`;
    const where = path.posix.join(prefix, norm);
    const dest = type === 'symlink' ? path.posix.join(path.posix.dirname(where), link) : path.posix.join(prefix, link);
    const d = path.posix.normalize(dest);
    if (d === '..' || d.startsWith('../')) return `link leaves the workspace: ${name} -> ${link}`;
  }
  return undefined;
}

/** Renames entries of a tar stream: strips `strip` (a leading path component) from every name. */
export function stripTarPrefix(input: Readable, strip: string): Readable {
  const extract = tarStream.extract();
  const pack = tarStream.pack();
  const cut = (n: string) =>
    n === strip || n === `${strip}/` ? '' : n.startsWith(`${strip}/`) ? n.slice(strip.length + 1) : n;
  extract.on('entry', (header, stream, next) => {
    stream.on('error', () => undefined);
    const name = cut(header.name);
    if (!name) {
      stream.resume();
      return stream.on('end', next);
    }
    const entry = pack.entry(
      { ...header, name, linkname: header.type === 'link' && header.linkname ? cut(header.linkname) : header.linkname },
      (err) => (err ? pack.destroy(err) : next()),
    );
    stream.pipe(entry);
  });
  extract.on('finish', () => pack.finalize());
  extract.on('error', (err) => pack.destroy(err));
  input.on('error', (err) => pack.destroy(err));
  input.pipe(extract);
  return pack as unknown as Readable;
}

/**
 * All or nothing: the confined archive is spooled to a temp file first, so only an upload
 * that passed every check is handed to `apply` (as the spooled file's path).
 */
export async function withConfinedArchive(
  tar: Readable,
  opts: ConfineOptions,
  apply: (spooled: string) => Promise<unknown>,
): Promise<void> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'tether-put-'));
  const spool = path.join(dir, 'archive.tar');
  try {
    await pipeline(confineTar(tar, opts), createWriteStream(spool));
    await apply(spool);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
}
