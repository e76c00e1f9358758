import { promises as fs, existsSync, readdirSync } from 'node:fs';
import * as path from 'node:path';
import { binName, type Pack, packCacheDir } from './manifest';
import { buildCargo, buildGo, copyRustToolchain, fetchGoToolchain, installNpm, run } from './installers';

/** The declaration folders a pack may carry, and where the runner reads them. */
const DECLARATIONS: Record<string, string> = {
  'languages.d': '/etc/tether/languages.d',
  'debug.d': '/etc/tether/debug.d',
};

/** Where the packs go in the build context (beside the template's own files). */
export const CONTEXT_FOLDER = '.tether-packs';

/** Where a pack's files live in the image. */
export const PACK_ROOT = '/opt/tether-packs';

/**
 * The Dockerfile lines that add the packs to a template, after whatever the template's own
 * Dockerfile does: the packs' folders are copied in, their executables linked onto PATH (checked
 * to be there: servers differ in how they answer --version), their declarations copied where
 * the runner reads them, and each pack's own Dockerfile fragment (for what npm cannot give,
 * e.g. Debian packages) run last.
 */
export function packsDockerfile(packs: Pack[], fragments: Record<string, string>): string {
  if (packs.length === 0) return '';
  // One COPY and one RUN for all of them: every layer is one more lower folder that each run's
  // overlay mount stacks, and a run's start pays for each.
  const steps: string[] = [];
  for (const p of packs) {
    const at = `${PACK_ROOT}/${p.name}`;
    for (const b of p.manifest.bin ?? []) {
      const name = binName(b);
      steps.push(`ln -s ${at}/${b} /usr/local/bin/${name}`, `test -x /usr/local/bin/${name}`);
    }
    for (const [folder, target] of Object.entries(DECLARATIONS)) {
      if (existsSync(path.join(p.dir, folder)))
        steps.push(`mkdir -p ${target}`, `cp ${at}/${folder}/*.json ${target}/`);
    }
  }
  const lines = ['', `# Language packs: ${packs.map((p) => p.name).join(', ')}.`, 'USER root'];
  lines.push(`COPY ${CONTEXT_FOLDER}/ ${PACK_ROOT}/`);
  if (steps.length > 0) lines.push(`RUN ${steps.join(' \\\n && ')}`);
  for (const p of packs) {
    const fragment = fragments[p.name];
    if (fragment) lines.push(`# pack ${p.name}`, fragment.trimEnd(), 'USER root');
  }
  lines.push('USER 1000:1000', '');
  return lines.join('\n');
}

/** Declaration files of two packs may not share a name: one would silently replace the other. */
function checkDeclarationNames(packs: Pack[]): void {
  const seen = new Map<string, string>();
  for (const p of packs) {
    for (const folder of Object.keys(DECLARATIONS)) {
      const d = path.join(p.dir, folder);
      if (!existsSync(d)) continue;
      for (const f of readdirSync(d).filter((n) => n.endsWith('.json'))) {
        const key = `${folder}/${f}`;
        const other = seen.get(key);
        if (other) throw new Error(`packs ${other} and ${p.name} both carry ${key}; rename one of them`);
        seen.set(key, p.name);
      }
    }
  }
}

/**
 * Puts each pack into the build context under .tether-packs/NAME (its manifest, declarations and
 * installs: node_modules, the programs built into bin/, a Go toolchain in go/ and a Rust one in
 * rust/, as hard links of
 * the cache) and returns the Dockerfile lines that install them. The sample project and its
 * expectations stay out of the image.
 */
export async function addPacksToContext(
  packs: Pack[],
  context: string,
  cacheDir = packCacheDir(),
  progress: NodeJS.WritableStream = process.stderr,
): Promise<string> {
  checkDeclarationNames(packs);
  const fragments: Record<string, string> = {};
  for (const p of packs) {
    const into = path.join(context, CONTEXT_FOLDER, p.name);
    await fs.mkdir(into, { recursive: true });
    await fs.copyFile(path.join(p.dir, 'pack.json'), path.join(into, 'pack.json'));
    for (const folder of Object.keys(DECLARATIONS)) {
      const d = path.join(p.dir, folder);
      if (existsSync(d)) await fs.cp(d, path.join(into, folder), { recursive: true });
    }
    const fragment = path.join(p.dir, 'Dockerfile');
    if (existsSync(fragment)) {
      const text = await fs.readFile(fragment, 'utf8');
      if (text.split('\n').some((l) => /^\s*FROM\s/i.test(l)))
        throw new Error(`${fragment}: a pack's Dockerfile is a fragment, without FROM`);
      fragments[p.name] = text;
    }
    // Hard links of the cache: a pack's install is up to hundreds of MB the build reads once.
    if ((p.manifest.npm ?? []).length > 0) {
      const installed = await installNpm(p, cacheDir, progress);
      await fs.copyFile(path.join(installed, 'package-lock.json'), path.join(into, 'package-lock.json'));
      await run('cp', ['-al', path.join(installed, 'node_modules'), path.join(into, 'node_modules')]);
    }
    const built = [
      ...((p.manifest.go ?? []).length > 0 ? [await buildGo(p, cacheDir, progress)] : []),
      ...((p.manifest.cargo ?? []).length > 0 ? [await buildCargo(p, cacheDir, progress)] : []),
    ];
    for (const b of built) {
      await fs.mkdir(path.join(into, 'bin'), { recursive: true });
      await run('cp', ['-al', `${path.join(b, 'bin')}/.`, path.join(into, 'bin')]);
    }
    if (p.manifest.goToolchain) {
      const toolchain = await fetchGoToolchain(p, cacheDir, progress);
      await fs.writeFile(path.join(into, 'go.version'), `${p.manifest.goToolchain}\n`);
      await run('cp', ['-al', path.join(toolchain, 'go'), path.join(into, 'go')]);
    }
    if (p.manifest.rustToolchain) {
      const toolchain = await copyRustToolchain(p, cacheDir, progress);
      await fs.writeFile(path.join(into, 'rust.version'), toolchain.version);
      await run('cp', ['-al', path.join(toolchain.dir, 'rust'), path.join(into, 'rust')]);
    }
  }
  return packsDockerfile(packs, fragments);
}

/**
 * What the context hash skips: a pack's node_modules is named by its package-lock.json (with
 * every package's integrity hash), its Go toolchain by go.version (the proxy's checksum database
 * vouches for it) and its Rust toolchain by rust.version (`rustc -vV`, with the build's commit),
 * all of which the hash covers.
 */
export function isPackInstall(rel: string): boolean {
  const parts = rel.split('/');
  return (
    parts.length === 3 && parts[0] === CONTEXT_FOLDER && ['node_modules', 'go', 'rust'].includes(parts[2] as string)
  );
}
