import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import * as tarStream from 'tar-stream';
import { confineTar, stripTarPrefix } from '../../../gateway/src/sandbox/tarFilter';

type Entry = Partial<tarStream.Header> & { name: string; body?: string };

async function tarOf(entries: Entry[]): Promise<Readable> {
  const pack = tarStream.pack();
  for (const { body, ...h } of entries) pack.entry(h as tarStream.Header, body ?? '');
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack as unknown as AsyncIterable<Buffer>) chunks.push(c);
  return Readable.from([Buffer.concat(chunks)]);
}

async function entriesOf(stream: Readable): Promise<(tarStream.Header & { body: string })[]> {
  const extract = tarStream.extract();
  const out: (tarStream.Header & { body: string })[] = [];
  const done = new Promise<void>((resolve, reject) => {
    extract.on('entry', (h, s, next) => {
      const parts: Buffer[] = [];
      s.on('error', () => undefined);
      s.on('data', (d: unknown) => void parts.push(d as Buffer));
      s.on('end', () => (out.push({ ...h, body: Buffer.concat(parts).toString() }), next()));
    });
    extract.on('finish', resolve);
    extract.on('error', reject);
    stream.on('error', reject);
  });
  stream.pipe(extract);
  await done;
  return out;
}

const confine = async (entries: Entry[], prefix = '') =>
  entriesOf(confineTar(await tarOf(entries), { prefix, uid: 1000, gid: 1000 }));

test('entries land under the prefix, after their parent directories, owned by the run user', async () => {
  const out = await confine([{ name: 'src/lib/a.ts', body: 'export {}', uid: 0, gid: 0, mode: 0o4777 }], 'pkg/x');
  assert.deepEqual(
    out.map((e) => `${e.type} ${e.name}`),
    ['directory pkg', 'directory pkg/x', 'directory pkg/x/src', 'directory pkg/x/src/lib', 'file pkg/x/src/lib/a.ts'],
  );
  for (const e of out) assert.deepEqual([e.uid, e.gid], [1000, 1000]);
  const file = out.at(-1)!;
  assert.equal(file.body, 'export {}');
  assert.equal(file.mode, 0o755, 'setuid and group/other write bits are dropped');
});

test('a directory entry is sent once even when the archive names it after its children', async () => {
  const out = await confine([
    { name: 'a/b.txt', body: 'b' },
    { name: 'a/', type: 'directory' },
    { name: 'a/c.txt', body: 'c' },
  ]);
  assert.deepEqual(
    out.map((e) => e.name),
    ['a', 'a/b.txt', 'a/c.txt'],
  );
});

test('links inside the workspace pass; hard links are re-rooted under the prefix', async () => {
  const out = await confine(
    [
      { name: 'real.txt', body: 'r' },
      { name: 'sub/up', type: 'symlink', linkname: '../real.txt' },
      { name: 'hard', type: 'link', linkname: 'real.txt' },
    ],
    'p',
  );
  assert.equal(out.find((e) => e.name === 'p/sub/up')?.linkname, '../real.txt');
  assert.equal(out.find((e) => e.name === 'p/hard')?.linkname, 'p/real.txt');
});

for (const [why, entry, prefix] of [
  ['an absolute name', { name: '/etc/passwd', body: 'x' }, ''],
  ['a name climbing out', { name: 'a/../../x', body: 'x' }, ''],
  ['a name climbing out of the prefix', { name: '../../x', body: 'x' }, 'deep/dir'],
  ['an absolute symlink', { name: 'l', type: 'symlink', linkname: '/etc' }, ''],
  ['a symlink leaving the workspace', { name: 'a/l', type: 'symlink', linkname: '../../x' }, ''],
  ['a hard link leaving the workspace', { name: 'h', type: 'link', linkname: '../x' }, ''],
  ['a device file', { name: 'dev', type: 'character-device', devmajor: 1, devminor: 3 }, ''],
  ['a fifo', { name: 'fifo', type: 'fifo' }, ''],
] as [string, Entry, string][]) {
  test(`refuses ${why}`, async () => {
    await assert.rejects(confine([{ name: 'ok.txt', body: 'fine' }, entry], prefix), /refused|leaves the workspace/);
  });
}

test('a prefix that escapes is refused up front', async () => {
  assert.throws(() => confineTar(Readable.from([]), { prefix: '../x', uid: 1, gid: 1 }), /escapes/);
});

test('stripTarPrefix renames entries relative to the stripped directory and drops it', async () => {
  const out = await entriesOf(
    stripTarPrefix(
      await tarOf([
        { name: 'workspace/', type: 'directory' },
        { name: 'workspace/a.txt', body: 'a' },
        { name: 'workspace/d/b.txt', body: 'b' },
      ]),
      'workspace',
    ),
  );
  assert.deepEqual(
    out.map((e) => e.name),
    ['a.txt', 'd/b.txt'],
  );
  assert.equal(out[1].body, 'b');
});
