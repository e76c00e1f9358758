import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { fixture, lspRun, type LspRun } from './helpers';

let t: TestGateway;
let r: LspRun;
before(async () => {
  t = await startTestGateway();
  r = await lspRun(t, fixture('go'));
});
after(async () => {
  if (r) await t.alice.deleteRun(r.runId).catch(() => undefined);
  await t?.close();
});

test('gopls: definition, type_definition, implementation, references, hover', async () => {
  assert.match(
    await r.ok('lsp', { action: 'definition', file: 'use.go', line: 8, symbol: 'TotalArea' }),
    /shapes\.go:21: func TotalArea\(shapes \[\]Shape\) float64 \{/,
  );
  assert.match(
    await r.ok('lsp', { action: 'type_definition', file: 'use.go', line: 4, symbol: 'Unit' }),
    /shapes\.go:11: type Circle struct \{/,
  );
  assert.match(
    await r.ok('lsp', { action: 'implementation', file: 'shapes.go', line: 6, symbol: 'Shape' }),
    /shapes\.go:11: type Circle struct \{/,
  );
  const refs = await r.ok('lsp', { action: 'references', file: 'shapes.go', line: 21, symbol: 'TotalArea' });
  assert.match(refs, /^2 references/);
  assert.match(refs, /use\.go:8: return TotalArea/);
  assert.match(
    await r.ok('lsp', { action: 'hover', file: 'use.go', line: 8, symbol: 'TotalArea' }),
    /TotalArea sums the areas of the shapes\./,
  );
});

test('gopls: symbols, diagnostics on write, code_actions, and go vet for "*"', async () => {
  assert.match(await r.ok('lsp', { action: 'symbols', query: 'TotalAr' }), /function TotalArea .*— shapes\.go:21/);
  assert.match(
    await r.ok('lsp', { action: 'symbols', file: 'shapes.go' }),
    /^struct Circle struct\{\.\.\.\} — line 11$/m,
  );
  const w = await r.ok('write', { path: 'bad.go', content: 'package geometry\n\nvar Bad int = "s"\n' });
  assert.match(
    w,
    /new diagnostics in bad\.go \(gopls\):\nbad\.go:3:15: error .*cannot use "s" \(untyped string constant\) as int value/,
  );
  assert.match(await r.ok('lsp', { action: 'diagnostics', file: 'bad.go' }), /bad\.go:3:15: error/);
  assert.match(
    await r.ok('lsp', { action: 'code_actions', file: 'bad.go', line: 3, symbol: 'Bad' }),
    /code action|no code actions/,
  );
  const all = await r.ok('lsp', { action: 'diagnostics', file: '*' });
  assert.match(
    all,
    /checker: go vet \.\/\.\.\. in \. \(workspace root\) — exit 2, [\d.]+ s\ntotals: [1-9]\d* errors?, \d+ warnings? in [1-9]\d* files?\n/,
  );
  assert.match(all, /bad\.go:3:15: cannot use "s"/);
  await r.ok('write', { path: 'bad.go', content: 'package geometry\n\nvar Bad int = 1\n' });
});

test('gopls: rename across files', async () => {
  const out = await r.ok('lsp_rename', { file: 'shapes.go', line: 11, symbol: 'Circle', new_name: 'Disc' });
  assert.match(out, /renamed "Circle" to "Disc": \d+ edit\(s\) in 2 file\(s\)/);
  assert.match(await r.ok('read', { path: 'use.go' }), /var Unit = Disc\{Radius: 1\}/);
  assert.match(await r.ok('lsp', { action: 'diagnostics', file: '*' }), /clean \(exit 0\)/);
});
