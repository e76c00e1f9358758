import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { promises as fs, existsSync, readdirSync, readFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { type Static, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';

const run = promisify(execFile);

/**
 * A language pack: one folder under packs/ that says how to put a language's server (and
 * what it needs) into a runner template, the languages.d / debug.d files that declare it,
 * a sample project and the answers a test expects from it.
 */
export const PackManifest = Type.Object(
  {
    description: Type.String({ minLength: 1, maxLength: 300 }),
    /** Pinned npm packages (name@exact-version), installed on the host and copied in. */
    npm: Type.Optional(Type.Array(Type.String({ pattern: '^(@[a-z0-9._-]+/)?[a-z0-9._-]+@\\d+\\.\\d+\\.\\d+$' }))),
    /** Go main packages (module/path@version), built on the host (static, CGO off) into bin/. */
    go: Type.Optional(
      Type.Array(
        Type.String({ pattern: '^[a-z0-9.-]+\\.[a-z]+(/[A-Za-z0-9._~-]+)+@v\\d+\\.\\d+\\.\\d+(-[0-9A-Za-z.-]+)?$' }),
      ),
    ),
    /** A Go toolchain (e.g. "1.26.8") from the module proxy (golang.org/toolchain), into go/. */
    goToolchain: Type.Optional(Type.String({ pattern: '^1\\.\\d+\\.\\d+$' })),
    /**
     * Executables put on the run's PATH (linked by their file name), as paths inside the pack's
     * folder in the image: `node_modules/.bin/NAME` (or a package's own binary where its .bin
     * entry is a wrapper), `bin/NAME` of a Go build, `go/bin/go` of the toolchain.
     */
    bin: Type.Optional(
      Type.Array(
        Type.String({
          pattern: '^(node_modules|bin|go)/(?!.*(^|/)\\.\\.(/|$))[A-Za-z0-9@._-]+(/[A-Za-z0-9@._-]+)*$',
          maxLength: 200,
        }),
      ),
    ),
  },
  { additionalProperties: false },
);
export type PackManifest = Static<typeof PackManifest>;

/** The name a bin entry is linked by on PATH. */
export function binName(entry: string): string {
  return path.posix.basename(entry);
}

export interface Pack {
  name: string;
  dir: string;
  manifest: PackManifest;
}

export const PACK_NAME = /^[a-z][a-z0-9-]{0,30}$/;

/** Where packs are read from: TETHER_PACKS_DIR, else the packs/ folder beside the gateway. */
export function packsDir(): string {
  return process.env.TETHER_PACKS_DIR ?? path.resolve(__dirname, '../../../../packs');
}

/** Where installed npm packages of packs are kept between builds, by the hash of their list. */
export function packCacheDir(): string {
  return path.join(process.env.TETHER_CACHE_DIR ?? path.join(os.homedir(), '.cache/tether'), 'packs');
}

export function listPacks(dir = packsDir()): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory() && existsSync(path.join(dir, e.name, 'pack.json')))
    .map((e) => e.name)
    .sort();
}

export function loadPack(name: string, dir = packsDir()): Pack {
  const available = () => `available packs: ${listPacks(dir).join(', ') || 'none'} (in ${dir})`;
  if (!PACK_NAME.test(name)) throw new Error(`pack name ${JSON.stringify(name)} is not valid; ${available()}`);
  const packDir = path.join(dir, name);
  const file = path.join(packDir, 'pack.json');
  if (!existsSync(file)) throw new Error(`no pack named ${name}; ${available()}`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new Error(`${file}: not readable JSON (${(err as Error).message})`);
  }
  if (!Value.Check(PackManifest, parsed)) {
    const first = [...Value.Errors(PackManifest, parsed)][0];
    throw new Error(`${file}: ${first ? `${first.path || '/'} ${first.message}` : 'invalid'}`);
  }
  return { name, dir: packDir, manifest: parsed };
}

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
 * Runs `fill(dir)` once per key into cacheDir/key, atomically: a build that fails or is killed
 * leaves no half-filled folder that a later build would take as done.
 */
async function cached(
  cacheDir: string,
  key: string,
  what: string,
  fill: (dir: string) => Promise<void>,
): Promise<string> {
  const dir = path.join(cacheDir, key);
  if (existsSync(path.join(dir, '.done'))) return dir;
  await fs.mkdir(cacheDir, { recursive: true });
  const partial = await fs.mkdtemp(path.join(cacheDir, `.${key}-`));
  try {
    await fill(partial);
    await fs.writeFile(path.join(partial, '.done'), '');
    await fs.rm(dir, { recursive: true, force: true });
    await fs.rename(partial, dir);
  } catch (err) {
    await run('chmod', ['-R', 'u+w', partial]).catch(() => undefined);
    await fs.rm(partial, { recursive: true, force: true });
    const e = err as Error & { stderr?: string };
    throw new Error(`${what} failed: ${(e.stderr || e.message).trim().slice(-2000)}`);
  }
  return dir;
}

const keyOf = (kind: string, items: string[]) =>
  `${kind}-${createHash('sha256')
    .update([...items].sort().join('\n'))
    .digest('hex')
    .slice(0, 16)}`;

/**
 * The pack's npm packages installed on this host, once per exact list: the build itself then
 * needs no registry and no certificates of its own (as setup.sh does for the runner image).
 * Their install scripts do not run on the host.
 */
function installNpm(pack: Pack, cacheDir: string, progress: NodeJS.WritableStream): Promise<string> {
  const pkgs = pack.manifest.npm ?? [];
  return cached(cacheDir, keyOf('npm', pkgs), `pack ${pack.name}: npm install`, async (dir) => {
    progress.write(`pack ${pack.name}: installing ${pkgs.join(' ')} from npm\n`);
    await fs.writeFile(path.join(dir, 'package.json'), '{"name":"tether-pack","private":true}\n');
    await run(
      'npm',
      ['install', '--no-fund', '--no-audit', '--loglevel=error', '--save-exact', '--ignore-scripts', ...pkgs],
      { cwd: dir, maxBuffer: 16 * 1024 * 1024 },
    );
  });
}

/** Go programs built on this host from the module proxy: static binaries, reproducible (-trimpath). */
function buildGo(pack: Pack, cacheDir: string, progress: NodeJS.WritableStream): Promise<string> {
  const mods = pack.manifest.go ?? [];
  return cached(cacheDir, keyOf('go', mods), `pack ${pack.name}: go install`, async (dir) => {
    const env = { ...process.env, GOBIN: path.join(dir, 'bin'), CGO_ENABLED: '0', GOFLAGS: '-trimpath' };
    for (const m of mods) {
      progress.write(`pack ${pack.name}: building ${m} from the Go module proxy\n`);
      const t0 = Date.now();
      await run('go', ['install', m], { env, maxBuffer: 16 * 1024 * 1024 });
      progress.write(`pack ${pack.name}: built ${m} in ${Math.round((Date.now() - t0) / 1000)} s\n`);
    }
  });
}

/** A Go toolchain as the proxy serves it (golang.org/toolchain), unpacked: a whole GOROOT. */
function fetchGoToolchain(pack: Pack, cacheDir: string, progress: NodeJS.WritableStream): Promise<string> {
  const version = pack.manifest.goToolchain as string;
  const mod = `golang.org/toolchain@v0.0.1-go${version}.linux-amd64`;
  return cached(cacheDir, `go${version}`, `pack ${pack.name}: fetching ${mod}`, async (dir) => {
    progress.write(`pack ${pack.name}: fetching ${mod}\n`);
    const modcache = path.join(dir, '.modcache');
    const { stdout } = await run('go', ['mod', 'download', '-json', mod], {
      env: { ...process.env, GOMODCACHE: modcache, GOFLAGS: '-modcacherw' },
      cwd: dir,
      maxBuffer: 16 * 1024 * 1024,
    });
    const goroot = path.join(dir, 'go');
    await fs.rename((JSON.parse(stdout) as { Dir: string }).Dir, goroot);
    await fs.rm(modcache, { recursive: true, force: true });
    // A module zip keeps no file modes: the go command marks a downloaded toolchain's programs
    // executable itself before it runs one (bin/ and pkg/tool/), and so does this.
    const tools = path.join(goroot, 'pkg/tool');
    for (const d of [path.join(goroot, 'bin'), ...(await fs.readdir(tools)).map((t) => path.join(tools, t))])
      for (const f of await fs.readdir(d)) await fs.chmod(path.join(d, f), 0o555);
  });
}

/**
 * Puts each pack into the build context under .tether-packs/NAME (its manifest, declarations and, for
 * npm packs, the installed node_modules as hard links of the cache) and returns the Dockerfile
 * lines that install them. The sample project and its expectations stay out of the image.
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
    if ((p.manifest.go ?? []).length > 0)
      await run('cp', ['-al', path.join(await buildGo(p, cacheDir, progress), 'bin'), path.join(into, 'bin')]);
    if (p.manifest.goToolchain) {
      const toolchain = await fetchGoToolchain(p, cacheDir, progress);
      await fs.writeFile(path.join(into, 'go.version'), `${p.manifest.goToolchain}\n`);
      await run('cp', ['-al', path.join(toolchain, 'go'), path.join(into, 'go')]);
    }
  }
  return packsDockerfile(packs, fragments);
}

/**
 * What the context hash skips: a pack's node_modules is named by its package-lock.json (with
 * every package's integrity hash) and its Go toolchain by go.version (the proxy's checksum
 * database vouches for it), both of which the hash covers.
 */
export function isPackInstall(rel: string): boolean {
  const parts = rel.split('/');
  return parts.length === 3 && parts[0] === CONTEXT_FOLDER && (parts[2] === 'node_modules' || parts[2] === 'go');
}
