import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { PassThrough } from 'node:stream';
import { addPacksToContext, isPackInstall, packsDockerfile } from '../../../gateway/src/templates/packs/context';
import { binName, listPacks, loadPack, packsDir } from '../../../gateway/src/templates/packs/manifest';
import { loadLanguages } from '../../../runner/src/tools/lsp/languages';

function tempPacks(files: Record<string, string>): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-packs-'));
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    writeFileSync(path.join(dir, rel), text);
  }
  return dir;
}

test('every shipped pack: a valid manifest, its servers declared in <pack>.json, a sample and checks', () => {
  const packs = listPacks();
  assert.ok(packs.length >= 8, packs.join(', '));
  for (const name of packs) {
    const pack = loadPack(name);
    const declared = path.join(pack.dir, 'languages.d');
    assert.deepEqual(readdirSync(declared), [`${name}.json`], `${name}: one declaration file, named for the pack`);
    const { servers, problems } = loadLanguages(declared, []);
    assert.deepEqual(problems, [], name);
    assert.ok(servers.length > 0, name);
    for (const s of servers)
      assert.ok(
        (pack.manifest.bin ?? []).map(binName).includes(s.command),
        `${name}: ${s.command} is one of the pack's bin`,
      );
    assert.ok(existsSync(path.join(pack.dir, 'sample')), `${name} has a sample project`);
    const { checks } = JSON.parse(readFileSync(path.join(pack.dir, 'expect.json'), 'utf8'));
    assert.ok(checks.length >= 3, `${name}: at least three checks`);
    for (const c of checks) {
      assert.ok(['lsp', 'lsp_rename', 'write', 'debug', 'eval'].includes(c.tool), `${name}: ${c.tool}`);
      assert.ok(c.match || c.absent, `${name}: a check says what its answer holds`);
    }
  }
});

test('an unknown or malformed pack is refused with what is available', () => {
  const dir = tempPacks({
    'good/pack.json': '{"description":"fine"}',
    'loose/pack.json': '{"description":"x","npm":["left-pad@latest"]}',
    'escape/pack.json': '{"description":"x","bin":["node_modules/../../bin/sh"]}',
    'broken/pack.json': '{',
  });
  try {
    assert.equal(loadPack('good', dir).manifest.description, 'fine');
    assert.throws(() => loadPack('nope', dir), /no pack named nope; available packs: broken, escape, good, loose/);
    assert.throws(() => loadPack('../etc', dir), /pack name "\.\.\/etc" is not valid/);
    assert.throws(() => loadPack('loose', dir), /loose\/pack\.json: \/npm\/0 /);
    assert.throws(() => loadPack('broken', dir), /broken\/pack\.json: not readable JSON/);
    assert.throws(() => loadPack('escape', dir), /escape\/pack\.json: \/bin\/0 /);
    assert.ok(listPacks().includes('bash'), `packs are read from ${packsDir()}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the Dockerfile links each bin, copies declarations, runs the fragment, and ends as the run user', () => {
  const dir = tempPacks({
    'one/pack.json':
      '{"description":"d","npm":["a@1.0.0"],"bin":["node_modules/.bin/a-ls","node_modules/@a/a-linux/bin/a"]}',
    'one/languages.d/one.json': '{}',
    'two/pack.json': '{"description":"d"}',
    'two/debug.d/two.json': '{}',
  });
  try {
    const text = packsDockerfile([loadPack('one', dir), loadPack('two', dir)], { two: 'RUN apt-get install -y x' });
    assert.match(text, /^USER root$/m);
    assert.match(text, /^COPY \.tether-packs\/ \/opt\/tether-packs\/$/m);
    assert.equal(text.match(/^(COPY|RUN) /gm)?.length, 3, 'one COPY, one RUN, and the fragment');
    assert.match(text, /ln -s \/opt\/tether-packs\/one\/node_modules\/\.bin\/a-ls \/usr\/local\/bin\/a-ls/);
    assert.match(text, /ln -s \/opt\/tether-packs\/one\/node_modules\/@a\/a-linux\/bin\/a \/usr\/local\/bin\/a /);
    assert.match(text, /cp \/opt\/tether-packs\/one\/languages\.d\/\*\.json \/etc\/tether\/languages\.d\//);
    assert.match(text, /cp \/opt\/tether-packs\/two\/debug\.d\/\*\.json \/etc\/tether\/debug\.d\//);
    assert.match(text, /# pack two\nRUN apt-get install -y x\nUSER root\nUSER 1000:1000\n$/);
    assert.equal(packsDockerfile([], {}), '');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('packs go into the context beside the template; clashing declarations and FROM lines are refused', async () => {
  const dir = tempPacks({
    'a/pack.json': '{"description":"d"}',
    'a/languages.d/same.json': '{}',
    'a/sample/x.txt': 'sample',
    'b/pack.json': '{"description":"d"}',
    'b/languages.d/same.json': '{}',
    'c/pack.json': '{"description":"d"}',
    'c/Dockerfile': 'FROM debian\n',
    'n/pack.json': '{"description":"d","npm":["left-pad@1.3.0"]}',
  });
  const ctx = mkdtempSync(path.join(os.tmpdir(), 'tether-ctx-'));
  try {
    const lines = await addPacksToContext([loadPack('a', dir)], ctx, path.join(ctx, 'cache'));
    assert.match(lines, /COPY \.tether-packs\/ /);
    assert.ok(existsSync(path.join(ctx, '.tether-packs/a/languages.d/same.json')));
    assert.ok(!existsSync(path.join(ctx, '.tether-packs/a/sample')), 'the sample stays out of the image');
    await assert.rejects(
      addPacksToContext([loadPack('a', dir), loadPack('b', dir)], ctx),
      /packs a and b both carry languages\.d\/same\.json/,
    );
    await assert.rejects(
      addPacksToContext([loadPack('c', dir)], ctx),
      /a pack's Dockerfile is a fragment, without FROM/,
    );
    assert.equal(isPackInstall('.tether-packs/a/node_modules'), true);
    assert.equal(isPackInstall('.tether-packs/a/node_modules/x'), false);
    assert.equal(isPackInstall('node_modules'), false);
    assert.equal(isPackInstall('.tether-packs/a/rust'), true);
    assert.equal(isPackInstall('.tether-packs/a/rust.version'), false);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    rmSync(ctx, { recursive: true, force: true });
  }
});

test("a Rust toolchain this host's rustup lacks is refused by name, and nothing is left in the cache", async () => {
  const dir = tempPacks({ 'r/pack.json': '{"description":"d","rustToolchain":"1.0.99"}' });
  const ctx = mkdtempSync(path.join(os.tmpdir(), 'tether-ctx-'));
  const cache = path.join(ctx, 'cache');
  try {
    await assert.rejects(
      addPacksToContext([loadPack('r', dir)], ctx, cache, new PassThrough()),
      /pack r: copying Rust 1\.0\.99 (failed: .*1\.0\.99|needs `rustup` on this machine's PATH)/s,
    );
    assert.deepEqual(existsSync(cache) ? readdirSync(cache) : [], []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    rmSync(ctx, { recursive: true, force: true });
  }
});
