/**
 * Language packs, measured side by side in one run (one command: `bench/run.sh packs`):
 *  1. the image: the runner image's size, a template of every pack, and each pack's layers;
 *  2. CreateRun → first tool answer, the pool off: the runner image and the template of every
 *     pack, interleaved, N of each (servers start on first use, so packs should cost nothing here);
 *  3. the same with both pooled (pool.size for the runner image, pool.templates for the template).
 * Usage: node dist/bench/packs.js [runs=10]
 */
import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import { Approval, RunStart } from '@tether/contract';
import { resultText } from '../clients/typescript/src';
import { defaultConfig } from '../gateway/src/config';
import { readImagesEnv } from '../gateway/src/sandbox/image';
import { templateBuilder } from '../gateway/src/sandbox/templateEngine';
import { buildTemplate } from '../gateway/src/templates/build';
import { listPacks } from '../gateway/src/templates/packs/manifest';
import { startTestGateway, type TestGateway } from '../test/helpers/gateway';
import { summary, writeResult } from './lib';

const RUNS = Number(process.argv[2] ?? 10);
const TEMPLATE = 'bench-packs';
const image = process.env.TETHER_IMAGE || readImagesEnv().TETHER_IMAGE;
if (!image) throw new Error('no runner image: run scripts/setup.sh');
const mib = (b: number) => Math.round(b / 2 ** 20);

const imageSize = (ref: string) =>
  Number(execFileSync('docker', ['image', 'inspect', '--format', '{{.Size}}', ref], { encoding: 'utf8' }).trim());

/** Each pack's folder in the image, in MiB (what its COPY adds). */
function packSizes(tag: string): Record<string, number> {
  const du = execFileSync(
    'docker',
    ['run', '--rm', '--network', 'none', '--entrypoint', 'sh', tag, '-c', 'du -sm /opt/tether-packs/*'],
    { encoding: 'utf8' },
  );
  return Object.fromEntries(
    du
      .trim()
      .split('\n')
      .map((l) => l.split('\t'))
      .map(([mb, dir]) => [path.basename(dir), Number(mb)]),
  );
}

/** The layers the packs' own Dockerfile fragments add (Debian packages), in MiB. */
function fragmentLayers(tag: string, base: string): Record<string, number> {
  const history = (ref: string) =>
    execFileSync('docker', ['history', '--no-trunc', '--human=false', '--format', '{{json .}}', ref], {
      encoding: 'utf8',
    })
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { ID: string; Size: string; CreatedBy: string });
  const inBase = new Set(history(base).map((l) => l.ID));
  return Object.fromEntries(
    history(tag)
      .filter(
        (l) =>
          !inBase.has(l.ID) &&
          Number(l.Size) > 2 ** 20 &&
          !/COPY \S+ in \/opt\/tether-packs\/$/.test(l.CreatedBy.trim()),
      )
      .map((l) => [l.CreatedBy.replace('/bin/sh -c ', '').slice(0, 80), mib(Number(l.Size))]),
  );
}

async function firstAnswer(t: TestGateway, template: string) {
  const t0 = performance.now();
  const r = await t.alice.createRun({ template, features: { lsp: true }, approvals: { write: Approval.AUTO } });
  if (r.error) throw new Error(r.error);
  const out = await t.alice.callTool(r.runId, 'write', { path: 'first.txt', content: 'first\n' });
  const ms = performance.now() - t0;
  if (out.result.isError) throw new Error(resultText(out.result));
  await t.alice.deleteRun(r.runId);
  return { ms, pooled: r.start === RunStart.POOL };
}

async function interleaved(t: TestGateway, wait?: () => Promise<void>) {
  const base: number[] = [];
  const packs: number[] = [];
  const pooled = { base: 0, packs: 0 };
  for (let i = 0; i < RUNS; i++) {
    await wait?.();
    const b = await firstAnswer(t, '');
    base.push(b.ms);
    pooled.base += Number(b.pooled);
    await wait?.();
    const p = await firstAnswer(t, TEMPLATE);
    packs.push(p.ms);
    pooled.packs += Number(p.pooled);
  }
  return { base: summary(base), packs: summary(packs), fromPool: pooled };
}

async function main() {
  const packs = listPacks();
  const built = await buildTemplate({ name: TEMPLATE, packs, baseImage: image as string, builder: templateBuilder() });
  const sizes = { runnerImageMiB: mib(imageSize(image as string)), templateMiB: mib(imageSize(built.tag)) };
  const layers = { packsMiB: packSizes(built.tag), fragmentLayersMiB: fragmentLayers(built.tag, image as string) };
  console.log('sizes', sizes, layers);

  const config = { provider: 'docker' as const, templates: { allowed: { alice: [TEMPLATE] } } };
  const cold = await startTestGateway(config);
  let coldResult: Awaited<ReturnType<typeof interleaved>>;
  try {
    coldResult = await interleaved(cold);
  } finally {
    await cold.close();
  }
  console.log('cold', coldResult);

  const warm = await startTestGateway({
    ...config,
    pool: { ...defaultConfig().pool, size: 1, templates: { [TEMPLATE]: 1 } },
  });
  let warmResult: Awaited<ReturnType<typeof interleaved>>;
  try {
    const classes = () => warm.gateway.pool.warm?.stats().classes ?? [];
    const filled = async () => {
      const t0 = Date.now();
      while (classes().length < 2 || classes().some((c) => c.idle < 1)) {
        if (Date.now() - t0 > 120_000) throw new Error(`the pool did not fill: ${JSON.stringify(classes())}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    warmResult = await interleaved(warm, filled);
  } finally {
    await warm.close();
  }
  console.log('pooled', warmResult);

  writeResult('packs', {
    what: 'CreateRun → first tool answer (a write) from the runner image and from a template of every pack, interleaved; image sizes',
    packs,
    template: built.tag,
    sizes,
    ...layers,
    coldMs: coldResult,
    pooledMs: warmResult,
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
