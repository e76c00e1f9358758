import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as tarFs from 'tar-fs';
import * as tarStream from 'tar-stream';

/** Workspace files by relative path: text is written as UTF-8. */
export type FileMap = Record<string, string | Uint8Array>;

/** Builds a tar archive of regular files from a map of path → content. */
export async function tarOf(files: FileMap, mode = 0o644): Promise<Buffer> {
  const pack = tarStream.pack();
  for (const [name, content] of Object.entries(files)) {
    pack.entry({ name, mode }, typeof content === 'string' ? Buffer.from(content) : Buffer.from(content));
  }
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/** A tar stream of a local folder's contents (paths relative to the folder). */
export function tarOfFolder(dir: string): Readable {
  return Readable.from(tarFs.pack(dir) as unknown as AsyncIterable<Buffer>, { objectMode: false });
}

/** Tar entry names as the gateway writes them, without "./" in front or "/" behind. */
export function entryName(name: string): string {
  return name.replace(/^(\.\/)+/, '').replace(/\/+$/, '');
}

/** The regular files of a tar archive, by entry name. */
export async function untar(tar: Uint8Array): Promise<Map<string, Buffer>> {
  const files = new Map<string, Buffer>();
  const ex = tarStream.extract();
  const done = new Promise<void>((resolve, reject) => {
    ex.on('entry', (header, stream, next) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: unknown) => void chunks.push(c as Buffer));
      stream.on('end', () => {
        if (header.type === 'file') files.set(entryName(header.name), Buffer.concat(chunks));
        next();
      });
      stream.on('error', reject);
    });
    ex.on('finish', resolve);
    ex.on('error', reject);
  });
  ex.end(Buffer.from(tar));
  await done;
  return files;
}

/** Unpacks a tar archive into a local folder; entries and links that would leave it are refused. */
export async function extractTo(tar: Uint8Array, dir: string): Promise<void> {
  await pipeline(Readable.from([Buffer.from(tar)]), tarFs.extract(dir) as unknown as NodeJS.WritableStream);
}
