import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import * as path from 'node:path';
import { VERSION as TS_CLIENT_VERSION } from '../../../clients/typescript/src/version';
import { TETHER_VERSION } from '../../../protocol/src/version';

// One version for the proto contract and every client: VERSION at the root, and each client's
// manifest (whichever exist: package.json, pyproject.toml, a Go version.go) must agree with it.
const ROOT = path.resolve(__dirname, '../../../..');
const VERSION = readFileSync(path.join(ROOT, 'VERSION'), 'utf8').trim();

/** Every file under `dir` whose name passes `match`, skipping installed and built trees. */
function find(dir: string, match: string | ((name: string) => boolean)): string[] {
  if (!existsSync(dir)) return [];
  const wanted = typeof match === 'string' ? (n: string) => n === match : match;
  const out: string[] = [];
  for (const entry of readdirSync(dir)) {
    if (
      ['node_modules', 'dist', 'build', '.venv', 'venv', 'gen', '__pycache__'].includes(entry) ||
      entry.startsWith('.')
    )
      continue;
    const p = path.join(dir, entry);
    if (statSync(p).isDirectory()) out.push(...find(p, wanted));
    else if (wanted(entry)) out.push(p);
  }
  return out;
}

/** The version a manifest declares, or undefined when it declares none. */
function declared(file: string): string | undefined {
  const text = readFileSync(file, 'utf8');
  if (file.endsWith('package.json')) return JSON.parse(text).version;
  if (file.endsWith('pyproject.toml')) {
    const project = /^\[project\]\s*$([\s\S]*?)(?=^\[|(?![\s\S]))/m.exec(text)?.[1] ?? '';
    return /^version\s*=\s*"([^"]+)"/m.exec(project)?.[1];
  }
  if (file.endsWith('.go')) return /\bVersion\s*=\s*"([^"]+)"/.exec(text)?.[1];
  return undefined;
}

test('VERSION is a plain semantic version', () => {
  assert.match(VERSION, /^\d+\.\d+\.\d+$/);
});

test('the root package and every client manifest declare the VERSION', () => {
  const manifests = [
    path.join(ROOT, 'package.json'),
    ...find(path.join(ROOT, 'clients'), 'package.json'),
    ...find(path.join(ROOT, 'clients'), 'pyproject.toml'),
    ...find(path.join(ROOT, 'clients', 'go'), 'version.go'),
  ];
  assert.ok(
    manifests.some((m) => m.endsWith(path.join('clients', 'typescript', 'package.json'))),
    'the TypeScript client is found',
  );
  for (const m of manifests) {
    const v = declared(m);
    assert.ok(v, `${path.relative(ROOT, m)} declares a version`);
    assert.equal(v, VERSION, `${path.relative(ROOT, m)} declares ${v}, VERSION is ${VERSION}`);
  }
  assert.equal(TS_CLIENT_VERSION, VERSION, 'clients/typescript/src/version.ts');
});

// The TypeScript client keeps a version.ts of its own: it is published alone and may import
// nothing outside its package.
const VERSION_SOURCE = path.join(ROOT, 'protocol', 'src', 'version.ts');

test('the gateway, the runner and the protocol take their version from protocol/src/version.ts', () => {
  assert.equal(TETHER_VERSION, VERSION, 'protocol/src/version.ts');
  const literal = /(['"`])v?\d+\.\d+\.\d+\1/;
  const copies: string[] = [];
  for (const dir of ['gateway/src', 'runner/src', 'protocol/src'])
    for (const file of find(path.join(ROOT, dir), (n) => /\.[cm]?[jt]s$/.test(n))) {
      const rel = path.relative(ROOT, file).split(path.sep).join('/');
      if (file === VERSION_SOURCE) continue;
      readFileSync(file, 'utf8')
        .split('\n')
        .forEach((line, i) => {
          if (literal.test(line)) copies.push(`${rel}:${i + 1}: ${line.trim()}`);
        });
    }
  assert.deepEqual(copies, [], 'a version literal: import TETHER_VERSION from protocol/src/version.ts instead');
});

test('the newest released contract is not newer than VERSION', () => {
  const released = readdirSync(path.join(ROOT, 'proto', 'releases'))
    .map((f) => /^tether-v(\d+)\.(\d+)\.(\d+)\.binpb$/.exec(f))
    .filter((m): m is RegExpExecArray => !!m)
    .map((m) => [Number(m[1]), Number(m[2]), Number(m[3])]);
  assert.ok(released.length > 0, 'proto/releases holds at least one release image');
  const newest = released.sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2]).at(-1)!;
  const current = VERSION.split('.').map(Number);
  const cmp = current[0] - newest[0] || current[1] - newest[1] || current[2] - newest[2];
  assert.ok(cmp >= 0, `VERSION ${VERSION} is older than the release ${newest.join('.')}`);
});
