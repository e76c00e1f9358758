import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { status } from '@grpc/grpc-js';
import { defaultConfig } from '../../../gateway/src/config';
import type { GatewayError } from '../../../gateway/src/errors';
import { effectiveDockerfile } from '../../../gateway/src/templates/build';
import { allowedTemplates, TemplateCatalog } from '../../../gateway/src/templates/catalog';
import { KubernetesTemplateImages } from '../../../gateway/src/sandbox/kubernetes/templateImages';
import { loadLanguages } from '../../../runner/src/tools/lsp/languages';
import { SERVERS } from '../../../runner/src/tools/lsp/servers';

// A Dockerfile's own ${...}, not a template literal's.
const BASE = ['$', '{TETHER_IMAGE}'].join('');

test('a fragment is put on the runner image; a full Dockerfile must end FROM it', () => {
  assert.equal(effectiveDockerfile('RUN true\n'), `ARG TETHER_IMAGE\nFROM ${BASE}\nRUN true\n`);
  const full = `FROM debian AS build\nRUN make\nARG TETHER_IMAGE\nFROM ${BASE}\nCOPY --from=build /x /x\n`;
  assert.equal(effectiveDockerfile(full), full);
  assert.throws(
    () => effectiveDockerfile('FROM debian:bookworm\nRUN true\n'),
    /final stage of a template must be FROM \$\{TETHER_IMAGE\}/,
  );
});

test('allowed templates: the base, those for every tenant, and the tenant own', async () => {
  const config = {
    ...defaultConfig(),
    templates: { allowed: { '*': ['python-data'], alice: ['fortran'] }, maxSnapshots: 8 },
  };
  assert.deepEqual(allowedTemplates(config, 'alice'), ['base', 'python-data', 'fortran']);
  assert.deepEqual(allowedTemplates(config, 'bob'), ['base', 'python-data']);
  const catalog = new TemplateCatalog(config, undefined);
  assert.equal(await catalog.imageFor('bob', ''), undefined);
  assert.equal(await catalog.imageFor('bob', 'base'), undefined);
  await assert.rejects(
    catalog.imageFor('bob', 'fortran'),
    (err: GatewayError) =>
      err.code === status.INVALID_ARGUMENT && /allowed templates: base, python-data$/.test(err.message),
  );
  await assert.rejects(
    catalog.imageFor('alice', 'fortran'),
    (err: GatewayError) => err.code === status.FAILED_PRECONDITION,
  );
});

test('under the kubernetes provider a template is the image the config names for the nodes', async () => {
  const base = defaultConfig();
  const config = {
    ...base,
    provider: 'kubernetes' as const,
    templates: { allowed: { alice: ['fortran', 'rust'] }, maxSnapshots: 8 },
    kubernetes: { ...base.kubernetes, templates: { fortran: 'registry.local/tether-template-fortran:abc' } },
  };
  const catalog = new TemplateCatalog(config, new KubernetesTemplateImages(config.kubernetes.templates));
  assert.equal(await catalog.imageFor('alice', 'fortran'), 'registry.local/tether-template-fortran:abc');
  await assert.rejects(
    catalog.imageFor('alice', 'rust'),
    (err: GatewayError) =>
      err.code === status.FAILED_PRECONDITION && /set kubernetes\.templates\.rust/.test(err.message),
  );
  await assert.rejects(catalog.imageFor('bob', 'fortran'), (err: GatewayError) => err.code === status.INVALID_ARGUMENT);
});

test('languages.d: declared servers come first, replace a built-in of the same id, and bad files are reported', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-langs-'));
  try {
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      path.join(dir, 'fortran.json'),
      JSON.stringify({
        id: 'fortls',
        languages: 'Fortran',
        extensions: { '.f90': 'fortran' },
        rootMarkers: ['fpm.toml'],
        command: 'fortls',
      }),
    );
    writeFileSync(
      path.join(dir, 'rust.json'),
      JSON.stringify([
        {
          id: 'rust-analyzer',
          languages: 'Rust',
          extensions: { '.rs': 'rust' },
          rootMarkers: ['Cargo.toml'],
          command: '/opt/ra/rust-analyzer',
          args: [],
        },
      ]),
    );
    writeFileSync(path.join(dir, 'broken.json'), '{');
    writeFileSync(
      path.join(dir, 'wrong.json'),
      JSON.stringify({ id: 'x', languages: 'X', extensions: {}, rootMarkers: [], command: 'x', extra: 1 }),
    );
    writeFileSync(path.join(dir, 'notes.txt'), 'ignored');
    const { servers, problems } = loadLanguages(dir);
    assert.equal(servers[0].id, 'fortls');
    assert.equal(servers[0].source, path.join(dir, 'fortran.json'));
    assert.deepEqual(servers[0].args, []);
    assert.equal(servers.filter((s) => s.id === 'rust-analyzer').length, 1);
    assert.equal(servers.find((s) => s.id === 'rust-analyzer')?.command, '/opt/ra/rust-analyzer');
    assert.equal(servers.length, SERVERS.length + 1);
    assert.equal(problems.length, 2);
    assert.match(problems.join('\n'), /broken\.json: not readable JSON/);
    assert.match(problems.join('\n'), /wrong\.json: /);
    assert.deepEqual(loadLanguages(path.join(dir, 'absent')), { servers: SERVERS, problems: [] });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a template's image is looked up once, used for a few seconds, then looked up again", async () => {
  const config = { ...defaultConfig(), templates: { allowed: { '*': ['py'] }, maxSnapshots: 8 } };
  let lookups = 0;
  let image = 'tether-template-py:1';
  const source = {
    imageOf: async () => {
      lookups++;
      return image;
    },
    list: async () => [],
  };
  let now = 0;
  const catalog = new TemplateCatalog(config, source, 5000, () => now);
  assert.equal(await catalog.imageFor('bob', 'py'), 'tether-template-py:1');
  now = 4000;
  image = 'tether-template-py:2';
  assert.equal(await catalog.imageFor('bob', 'py'), 'tether-template-py:1');
  assert.equal(lookups, 1);
  now = 5001;
  assert.equal(await catalog.imageFor('bob', 'py'), 'tether-template-py:2');
  assert.equal(lookups, 2);
});
