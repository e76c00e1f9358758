import { existsSync, readdirSync, readFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { type Static, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';

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
    /**
     * Rust crates (`name@x.y.z`, or `name@x.y.z+feature,feature` for cargo features), built on
     * the host with its cargo (`--locked`) into bin/: glibc binaries, for a Debian bookworm image.
     */
    cargo: Type.Optional(
      Type.Array(Type.String({ pattern: '^[A-Za-z0-9_-]+@\\d+\\.\\d+\\.\\d+(\\+[A-Za-z0-9_-]+(,[A-Za-z0-9_-]+)*)?$' })),
    ),
    /** A Go toolchain version (1.26.8, say) from the module proxy (golang.org/toolchain), into go/. */
    goToolchain: Type.Optional(Type.String({ pattern: '^1\\.\\d+\\.\\d+$' })),
    /**
     * A Rust toolchain version (1.95.0, say), copied from this host's rustup into rust/: no
     * registry serves one, and rustup's own download site is not one a build may count on.
     */
    rustToolchain: Type.Optional(Type.String({ pattern: '^1\\.\\d+\\.\\d+$' })),
    /**
     * Executables put on the run's PATH (linked by their file name), as paths inside the pack's
     * folder in the image: `node_modules/.bin/NAME` (or a package's own binary where its .bin
     * entry is a wrapper), `bin/NAME` of a Go or cargo build, `go/bin/go` or `rust/bin/cargo`
     * of a toolchain.
     */
    bin: Type.Optional(
      Type.Array(
        Type.String({
          pattern: '^(node_modules|bin|go|rust)/(?!.*(^|/)\\.\\.(/|$))[A-Za-z0-9@._-]+(/[A-Za-z0-9@._-]+)*$',
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
  return process.env.TETHER_PACKS_DIR ?? path.resolve(__dirname, '../../../../../packs');
}

/** Where packs' installs (npm, Go, cargo, toolchains) are kept between builds, by the hash of what they hold. */
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
