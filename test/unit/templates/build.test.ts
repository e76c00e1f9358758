import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { PassThrough } from 'node:stream';
import { status } from '@grpc/grpc-js';
import type Docker from 'dockerode';
import { defaultConfig } from '../../../gateway/src/config';
import type { GatewayError } from '../../../gateway/src/errors';
import { DockerTemplateImages } from '../../../gateway/src/sandbox/dockerTemplateImages';
import type { TemplateImageBuild, TemplateImageBuilder } from '../../../gateway/src/sandbox/templateImages';
import { buildTemplate } from '../../../gateway/src/templates/build';

/** An engine in memory: images by reference, each with its entrypoint. */
class FakeBuilder implements TemplateImageBuilder {
  readonly images = new Map<string, { id: string; entrypoint: string[] | null }>();
  readonly builds: TemplateImageBuild[] = [];
  constructor(private readonly builtEntrypoint: string[] | null = ['/runner']) {}

  async imageId(ref: string) {
    return this.images.get(ref)?.id;
  }
  async entrypoint(ref: string) {
    const image = this.images.get(ref);
    if (!image) throw new Error(`no image ${ref}`);
    return image.entrypoint;
  }
  async build(build: TemplateImageBuild) {
    this.builds.push(build);
    this.images.set(build.tag, { id: `sha256:${this.builds.length}`, entrypoint: this.builtEntrypoint });
  }
  async remove(ref: string) {
    this.images.delete(ref);
  }
}

function withTemplate(dockerfile: string, body: (dir: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-template-unit-'));
  writeFileSync(path.join(dir, 'Dockerfile'), dockerfile);
  return body(dir).finally(() => rmSync(dir, { recursive: true, force: true }));
}

const quiet = () => new PassThrough().resume();

test('a template is built once per content, labelled with its name, base and inputs', async () => {
  const builder = new FakeBuilder();
  builder.images.set('tether-runner:1', { id: 'sha256:base', entrypoint: ['/runner'] });
  await withTemplate('RUN true\n', async (dir) => {
    const opts = { name: 'fortran', dir, baseImage: 'tether-runner:1', builder, progress: quiet() };
    const first = await buildTemplate(opts);
    assert.equal(first.built, true);
    assert.match(first.tag, /^tether-template-fortran:[0-9a-f]{16}$/);
    const [build] = builder.builds;
    assert.deepEqual(build.buildArgs, { TETHER_IMAGE: 'tether-runner:1' });
    assert.deepEqual(build.labels, {
      'dev.tether.template': 'fortran',
      'dev.tether.template.base': 'tether-runner:1',
      'dev.tether.inputs': first.tag.split(':')[1],
    });
    const again = await buildTemplate(opts);
    assert.deepEqual(again, { tag: first.tag, built: false, seconds: 0, warmup: false });
    assert.equal(builder.builds.length, 1);
  });
});

test("a template's warm-up is checked before the build and carried on the image; a bad one builds nothing", async () => {
  const builder = new FakeBuilder();
  builder.images.set('tether-runner:1', { id: 'sha256:base', entrypoint: ['/runner'] });
  await withTemplate('RUN true\n', async (dir) => {
    const opts = { name: 'warm', dir, baseImage: 'tether-runner:1', builder, progress: quiet() };
    writeFileSync(path.join(dir, 'warmup.json'), '{"open": ["../outside.ts"]}');
    await assert.rejects(buildTemplate(opts), /warmup\.json: not a warm-up \(\/open\/0 /);
    assert.equal(builder.builds.length, 0);
    writeFileSync(path.join(dir, 'warmup.json'), '{"open": ["src/a.ts"]}');
    const built = await buildTemplate(opts);
    assert.equal(built.warmup, true);
    assert.deepEqual(JSON.parse(builder.builds[0].labels['dev.tether.template.warmup']), { open: ['src/a.ts'] });
  });
});

test('a template on a missing runner image, or one replacing its entrypoint, is refused', async () => {
  await withTemplate('RUN true\n', async (dir) => {
    const builder = new FakeBuilder(['/bin/sh']);
    const opts = { name: 'shell', dir, baseImage: 'tether-runner:1', builder, progress: quiet() };
    await assert.rejects(buildTemplate(opts), /runner image tether-runner:1 not found/);
    builder.images.set('tether-runner:1', { id: 'sha256:base', entrypoint: ['/runner'] });
    await assert.rejects(buildTemplate(opts), /changes the runner's ENTRYPOINT/);
    assert.deepEqual([...builder.images.keys()], ['tether-runner:1'], 'the refused image is removed');
  });
});

test("the docker engine's template image is the newest built on the current runner image", async () => {
  const config = { ...defaultConfig(), docker: { ...defaultConfig().docker, image: 'tether-runner:new' } };
  const image = (name: string, tag: string, base: string, created: number) => ({
    Id: `sha256:${tag}`,
    RepoTags: [`tether-template-${name}:${tag}`],
    Labels: { 'dev.tether.template': name, 'dev.tether.template.base': base },
    Created: created,
  });
  const held = [
    image('fortran', 'a', 'tether-runner:new', 1),
    image('fortran', 'b', 'tether-runner:new', 2),
    image('fortran', 'c', 'tether-runner:old', 3),
    image('rust', 'd', 'tether-runner:old', 4),
  ];
  const docker = {
    listImages: async (opts: { filters: string }) => {
      const [label] = JSON.parse(opts.filters).label as string[];
      const name = label.split('=')[1];
      return held.filter((i) => !name || i.Labels['dev.tether.template'] === name);
    },
  } as unknown as Docker;
  const images = new DockerTemplateImages(config, docker);
  assert.equal(await images.imageOf('fortran'), 'tether-template-fortran:b');
  assert.deepEqual(
    (await images.list()).map((t) => t.image),
    ['tether-template-rust:d', 'tether-template-fortran:c', 'tether-template-fortran:b', 'tether-template-fortran:a'],
  );
  await assert.rejects(
    images.imageOf('rust'),
    (err: GatewayError) =>
      err.code === status.FAILED_PRECONDITION && /built on tether-runner:old, not on the current/.test(err.message),
  );
  await assert.rejects(
    images.imageOf('go'),
    (err: GatewayError) => err.code === status.FAILED_PRECONDITION && /not built on this engine/.test(err.message),
  );
});
