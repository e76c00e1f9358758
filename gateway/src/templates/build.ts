import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { TemplateImageBuilder } from '../sandbox/templateImages';
import { BASE_TEMPLATE, TEMPLATE_LABELS, TEMPLATE_NAME, templateRepository } from './naming';
import { addPacksToContext, isPackInstall } from './packs/context';
import { loadPack, packCacheDir } from './packs/manifest';
import { parseWarmup, WARMUP_FILE } from './warmup';

/** The build argument a template's Dockerfile names its base by. */
export const BASE_ARG = 'TETHER_IMAGE';

export interface TemplateBuildOptions {
  name: string;
  /** The build context: a Dockerfile (full, or a fragment without FROM) and what it copies. */
  dir?: string;
  /** Language packs (folders of packs/) added after the Dockerfile's own steps. */
  packs?: string[];
  /** Where packs' npm installs are cached (default ~/.cache/tether/packs). */
  packCache?: string;
  /** The runner image to build on. */
  baseImage: string;
  /** The engine that builds it (`templateBuilder()` of sandbox/templateEngine). */
  builder: TemplateImageBuilder;
  /** Where the build's progress goes. */
  progress?: NodeJS.WritableStream;
}

export interface TemplateBuildResult {
  tag: string;
  built: boolean;
  seconds: number;
  /** Whether the template declares a warm-up (a gateway makes its snapshot on the template's first use). */
  warmup: boolean;
}

/**
 * The Dockerfile to build: a fragment (no FROM) is put on top of the runner image; a full
 * Dockerfile must end in a stage FROM the runner image (earlier stages may build anything).
 */
export function effectiveDockerfile(text: string): string {
  const froms = text.split('\n').filter((l) => /^\s*FROM\s/i.test(l));
  if (froms.length === 0) return `ARG ${BASE_ARG}\nFROM \${${BASE_ARG}}\n${text}`;
  const last = froms[froms.length - 1];
  if (!new RegExp(`^\\s*FROM\\s+(\\$\\{${BASE_ARG}\\}|\\$${BASE_ARG})(\\s|$)`, 'i').test(last)) {
    throw new Error(
      `the final stage of a template must be FROM \${${BASE_ARG}} (the runner image), not: ${last.trim()}`,
    );
  }
  return text;
}

/** Names and contents of every file under dir, in a fixed order (a pack's install by its lockfile). */
async function hashTree(hash: ReturnType<typeof createHash>, dir: string, rel = ''): Promise<void> {
  const entries = (await fs.readdir(path.join(dir, rel), { withFileTypes: true })).sort((a, b) =>
    a.name < b.name ? -1 : 1,
  );
  for (const e of entries) {
    const p = path.posix.join(rel, e.name);
    if (e.isDirectory()) {
      if (!isPackInstall(p)) await hashTree(hash, dir, p);
    } else if (e.isSymbolicLink()) hash.update(`L ${p} ${await fs.readlink(path.join(dir, p))}\n`);
    else if (e.isFile())
      hash
        .update(`F ${p} `)
        .update(await fs.readFile(path.join(dir, p)))
        .update('\n');
  }
}

/**
 * Builds a template image tagged by what went into it (context, Dockerfile, base image id),
 * like the runner image: an unchanged template is not rebuilt.
 */
export async function buildTemplate(opts: TemplateBuildOptions): Promise<TemplateBuildResult> {
  const { name, dir, baseImage, builder } = opts;
  const out = opts.progress ?? process.stderr;
  if (!TEMPLATE_NAME.test(name) || name === BASE_TEMPLATE)
    throw new Error(`template name ${JSON.stringify(name)} must match ${TEMPLATE_NAME} and not be "${BASE_TEMPLATE}"`);
  const packs = [...new Set(opts.packs ?? [])].map((p) => loadPack(p));
  if (!dir && packs.length === 0) throw new Error('a template needs a folder with a Dockerfile, or at least one pack');
  const own = dir ? await readDockerfile(dir) : '';
  // Checked before anything is built: a bad warm-up is the template author's to fix now.
  const warmup = dir ? await readWarmup(dir) : undefined;
  const baseId = await builder.imageId(baseImage);
  if (!baseId) throw new Error(`runner image ${baseImage} not found: run scripts/setup.sh first`);

  // The context: the template's folder as it is, or a copy of it with the packs beside it.
  const context = packs.length > 0 ? await fs.mkdtemp(path.join(os.tmpdir(), 'tether-template-')) : (dir as string);
  try {
    let dockerfile = effectiveDockerfile(own);
    if (packs.length > 0) {
      if (dir) await fs.cp(dir, context, { recursive: true });
      dockerfile += await addPacksToContext(packs, context, opts.packCache ?? packCacheDir(), out);
    }
    const hash = createHash('sha256');
    hash.update(`${baseImage} ${baseId}\n`).update(dockerfile).update('\n');
    await hashTree(hash, context);
    const inputs = hash.digest('hex').slice(0, 16);
    const tag = `${templateRepository(name)}:${inputs}`;
    if (await builder.imageId(tag)) {
      out.write(`${tag} exists, not rebuilding\n`);
      return { tag, built: false, seconds: 0, warmup: warmup !== undefined };
    }

    out.write(
      `building ${tag} on ${baseImage}${packs.length ? ` with packs ${packs.map((p) => p.name).join(', ')}` : ''}\n`,
    );
    const t0 = Date.now();
    const labels = {
      [TEMPLATE_LABELS.name]: name,
      [TEMPLATE_LABELS.base]: baseImage,
      [TEMPLATE_LABELS.inputs]: inputs,
      ...(warmup ? { [TEMPLATE_LABELS.warmup]: JSON.stringify(warmup) } : {}),
    };
    await builder.build({ name, dir: context, dockerfile, buildArgs: { [BASE_ARG]: baseImage }, labels, tag }, out);
    await checkRunnerKept(builder, tag, baseImage);
    const seconds = Math.round((Date.now() - t0) / 100) / 10;
    out.write(`built ${tag} in ${seconds}s\n`);
    if (warmup)
      out.write(
        `${tag} has a warm-up: a gateway makes its snapshot on the template's first use (tether template warm ${name} has it made now and prints the warm-up's time and the snapshot's size)\n`,
      );
    return { tag, built: true, seconds, warmup: warmup !== undefined };
  } finally {
    if (context !== dir) await fs.rm(context, { recursive: true, force: true });
  }
}

async function readDockerfile(dir: string): Promise<string> {
  const file = path.join(dir, 'Dockerfile');
  try {
    return await fs.readFile(file, 'utf8');
  } catch {
    throw new Error(
      `${file} not found: a template folder holds a Dockerfile (a full one FROM \${${BASE_ARG}}, or a fragment without FROM)`,
    );
  }
}

/** The folder's warm-up, checked; undefined when it has none. */
async function readWarmup(dir: string) {
  const file = path.join(dir, WARMUP_FILE);
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch {
    return undefined;
  }
  return parseWarmup(text, file);
}

/** A template adds to the runner image; it may not replace how the runner starts. */
async function checkRunnerKept(builder: TemplateImageBuilder, tag: string, baseImage: string): Promise<void> {
  const [mine, base] = await Promise.all([builder.entrypoint(tag), builder.entrypoint(baseImage)]);
  if (JSON.stringify(mine) !== JSON.stringify(base)) {
    await builder.remove(tag).catch(() => undefined);
    throw new Error(
      `template ${tag} changes the runner's ENTRYPOINT; a template may add to the runner image but not replace its entrypoint`,
    );
  }
}
