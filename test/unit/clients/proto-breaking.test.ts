import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

// `npm run lint:proto:breaking` as part of the unit tests: proto/ must stay compatible with the
// last release, and the check must really catch a break.
const ROOT = path.resolve(__dirname, '../../../..');

function breaking(module?: string) {
  const r = spawnSync('bash', [path.join(ROOT, 'scripts/proto-breaking.sh'), ...(module ? [module] : [])], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 120_000,
  });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

test('proto/ is compatible with the last released contract', () => {
  const r = breaking();
  assert.equal(r.status, 0, r.out);
  assert.match(r.out, /against proto\/releases\/tether-v\d+\.\d+\.\d+\.binpb/);
});

test('removing a field from a copy of the contract is reported as a break', (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-proto-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  cpSync(path.join(ROOT, 'proto'), dir, { recursive: true, filter: (src) => !src.includes(`${path.sep}releases`) });
  const file = path.join(dir, 'tether/v1/gateway.proto');
  const text = readFileSync(file, 'utf8');
  const cut = text.replace(/^\s*string target_space = 2;\n/m, '');
  assert.notEqual(cut, text, 'the field to remove is in the contract');
  writeFileSync(file, cut);
  const r = breaking(dir);
  assert.notEqual(r.status, 0, r.out);
  assert.match(r.out, /target_space/);
});
