import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, writeFileSync, chmodSync, realpathSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { RootDetector } from '../../../runner/src/tools/lsp/roots';
import { resolveBinary } from '../../../runner/src/tools/lsp/binaries';
import { SERVERS } from '../../../runner/src/tools/lsp/servers';
import { ServerSupervisor } from '../../../runner/src/tools/lsp/supervisor';

const spec = (id: string) => SERVERS.find((s) => s.id === id)!;

function tree(files: Record<string, string>): string {
  const root = realpathSync(mkdtempSync(path.join(os.tmpdir(), 'lsp-roots-')));
  for (const [p, c] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(root, p)), { recursive: true });
    writeFileSync(path.join(root, p), c);
  }
  return root;
}

test('nearest root marker wins: a Go module nested in a TypeScript repo', async () => {
  const ws = tree({
    'package.json': '{}',
    'src/a.ts': '',
    'tools/geo/go.mod': 'module x',
    'tools/geo/main.go': '',
    'tools/geo/gen.ts': '',
  });
  const d = new RootDetector(ws);
  assert.equal(await d.rootFor(path.join(ws, 'src/a.ts'), spec('typescript')), ws);
  assert.equal(await d.rootFor(path.join(ws, 'tools/geo/main.go'), spec('gopls')), path.join(ws, 'tools/geo'));
  assert.equal(await d.rootFor(path.join(ws, 'tools/geo/gen.ts'), spec('typescript')), ws);
  assert.equal(await d.rootFor(path.join(ws, 'src/a.ts'), spec('gopls')), undefined);
  assert.deepEqual(await d.allRoots(spec('gopls')), [path.join(ws, 'tools/geo')]);
});

test('a root marker above the workspace does not count', async () => {
  const outer = tree({ 'go.mod': 'module outer', 'ws/main.go': '' });
  const d = new RootDetector(path.join(outer, 'ws'));
  assert.equal(await d.rootFor(path.join(outer, 'ws/main.go'), spec('gopls')), undefined);
});

test('a server that answers file by file falls back to the workspace root; a nearer marker still wins', async () => {
  const ws = tree({ 'ci/deploy.yaml': '', 'chart/.yamllint': '', 'chart/values.yaml': '' });
  const yaml = { ...spec('gopls'), id: 'yaml', rootMarkers: ['.yamllint'], rootFallback: 'workspace' as const };
  const d = new RootDetector(ws);
  assert.equal(await d.rootFor(path.join(ws, 'ci/deploy.yaml'), yaml), ws);
  assert.equal(await d.rootFor(path.join(ws, 'chart/values.yaml'), yaml), path.join(ws, 'chart'));
  assert.deepEqual(await d.allRoots(yaml), [path.join(ws, 'chart')]);
  assert.deepEqual(await new RootDetector(path.join(ws, 'ci')).allRoots(yaml), [path.join(ws, 'ci')]);
});

test('project-local binaries win over $PATH', async () => {
  const ws = tree({
    'node_modules/.bin/tool': '#!/bin/sh\n',
    'py/.venv/bin/tool': '#!/bin/sh\n',
    'elsewhere/tool': '#!/bin/sh\n',
  });
  for (const p of ['node_modules/.bin/tool', 'py/.venv/bin/tool', 'elsewhere/tool']) chmodSync(path.join(ws, p), 0o755);
  const envPath = path.join(ws, 'elsewhere');
  assert.equal(await resolveBinary('tool', path.join(ws, 'py'), ws, envPath), path.join(ws, 'py/.venv/bin/tool'));
  assert.equal(await resolveBinary('tool', ws, ws, envPath), path.join(ws, 'node_modules/.bin/tool'));
  assert.equal(
    await resolveBinary('tool', ws, path.join(ws, 'py'), envPath),
    path.join(ws, 'elsewhere/tool'),
    'outside the workspace is not project-local',
  );
  assert.equal(await resolveBinary('nothing-here', ws, ws, envPath), undefined);
});

test('placement says which half is missing', async () => {
  const ws = tree({ 'a.rs': '', 'x.go': '', 'm/Cargo.toml': '', 'm/b.rs': '', 'notes.txt': '' });
  const sup = new ServerSupervisor(ws, { readyTimeoutMs: 1000, progressGraceMs: 0, idleStopMs: 0 }, [
    { ...spec('rust-analyzer'), command: 'no-such-rust-analyzer' },
    spec('gopls'),
  ]);
  assert.match(
    JSON.stringify(await sup.place(path.join(ws, 'a.rs'))),
    /no root marker \(Cargo\.toml\) above this file and binary no-such-rust-analyzer not found/,
  );
  assert.match(
    JSON.stringify(await sup.place(path.join(ws, 'm/b.rs'))),
    /rust-analyzer: binary no-such-rust-analyzer not found/,
  );
  assert.match(JSON.stringify(await sup.place(path.join(ws, 'x.go'))), /gopls: no root marker \(go\.work, go\.mod\)/);
  assert.match(JSON.stringify(await sup.place(path.join(ws, 'notes.txt'))), /no language server handles \.txt/);
});
