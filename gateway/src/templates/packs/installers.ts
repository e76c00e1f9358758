import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { promises as fs, existsSync } from 'node:fs';
import * as path from 'node:path';
import { promisify } from 'node:util';
import type { Pack } from './manifest';

export const run = promisify(execFile);

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
    const e = err as Error & { stderr?: string; code?: string; path?: string };
    if (e.code === 'ENOENT' && e.path)
      throw new Error(
        `${what} needs \`${e.path}\` on this machine's PATH: a pack's installs are made here, not in the image build`,
      );
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
export function installNpm(pack: Pack, cacheDir: string, progress: NodeJS.WritableStream): Promise<string> {
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
export function buildGo(pack: Pack, cacheDir: string, progress: NodeJS.WritableStream): Promise<string> {
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

/** Rust programs built on this host from crates.io, with the versions their lockfiles pin. */
export function buildCargo(pack: Pack, cacheDir: string, progress: NodeJS.WritableStream): Promise<string> {
  const crates = pack.manifest.cargo ?? [];
  return cached(cacheDir, keyOf('cargo', crates), `pack ${pack.name}: cargo install`, async (dir) => {
    for (const c of crates) {
      const [spec, features] = c.split('+');
      const [name, version] = spec.split('@');
      progress.write(`pack ${pack.name}: building ${c} from crates.io (minutes, once per machine)\n`);
      const t0 = Date.now();
      const args = [
        'install',
        '--locked',
        '--root',
        dir,
        '--version',
        version,
        ...(features ? ['--features', features] : []),
        name,
      ];
      await run('cargo', args, {
        maxBuffer: 64 * 1024 * 1024,
        env: { ...process.env, CARGO_TARGET_DIR: path.join(dir, '.target') },
      });
      await fs.rm(path.join(dir, '.target'), { recursive: true, force: true });
      progress.write(`pack ${pack.name}: built ${c} in ${Math.round((Date.now() - t0) / 1000)} s\n`);
    }
  });
}

/** A Go toolchain as the proxy serves it (golang.org/toolchain), unpacked: a whole GOROOT. */
export function fetchGoToolchain(pack: Pack, cacheDir: string, progress: NodeJS.WritableStream): Promise<string> {
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
 * A Rust toolchain from this host's rustup: its programs and libraries (the standard library's
 * compiled crates, the compiler's own libraries, the sources where rustup installed rust-src),
 * without the 800 MB of documentation. `version` in the result is `rustc -vV`, which names the
 * exact build.
 */
export async function copyRustToolchain(
  pack: Pack,
  cacheDir: string,
  progress: NodeJS.WritableStream,
): Promise<{ dir: string; version: string }> {
  const version = pack.manifest.rustToolchain as string;
  const dir = await cached(cacheDir, `rust${version}`, `pack ${pack.name}: copying Rust ${version}`, async (into) => {
    progress.write(`pack ${pack.name}: copying the Rust ${version} toolchain from this host's rustup\n`);
    const { stdout } = await run('rustup', ['run', version, 'rustc', '--print', 'sysroot']);
    const sysroot = stdout.trim();
    const { stdout: id } = await run(path.join(sysroot, 'bin/rustc'), ['-vV']);
    if (!id.startsWith(`rustc ${version} `))
      throw new Error(`rustup's toolchain ${version} is ${id.split('\n')[0]}; install ${version} with rustup`);
    const rust = path.join(into, 'rust');
    await fs.mkdir(rust);
    for (const part of ['bin', 'lib', 'libexec'])
      if (existsSync(path.join(sysroot, part))) await run('cp', ['-a', path.join(sysroot, part), rust]);
    await fs.writeFile(path.join(into, 'version'), id);
  });
  return { dir, version: await fs.readFile(path.join(dir, 'version'), 'utf8') };
}
