import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';

/** What the stand-in npm registry serves, and what it saw. */
export interface StandInRegistry {
  port: number;
  /** Request paths, in order. */
  seen: string[];
  close(): Promise<void>;
}

export const NPM_PACKAGE = 'tether-npm-demo';
export const NPM_VERSION = '1.0.0';
export const NPM_PACKAGE_VALUE = 'served by the stand-in registry';

/** A one-file npm package tarball (package/ inside, as npm pack writes it), made with the host's tar. */
function buildTarball(): Buffer {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-npm-pkg-'));
  try {
    mkdirSync(path.join(dir, 'package'));
    writeFileSync(
      path.join(dir, 'package/package.json'),
      JSON.stringify({ name: NPM_PACKAGE, version: NPM_VERSION, main: 'index.js' }),
    );
    writeFileSync(
      path.join(dir, 'package/index.js'),
      `module.exports = { value: ${JSON.stringify(NPM_PACKAGE_VALUE)} };\n`,
    );
    const file = path.join(dir, 'pkg.tgz');
    execFileSync('tar', ['-czf', file, '-C', dir, 'package']);
    return readFileSync(file);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * An npm registry on loopback serving one package: its packument at `/<name>` and its tarball
 * at `/<name>/-/<name>-<version>.tgz`. The tarball URL in the packument uses the Host the
 * client asked for, so npm fetches it through the same (proxied) name.
 */
export async function startStandInRegistry(): Promise<StandInRegistry> {
  const tarball = buildTarball();
  const integrity = `sha512-${createHash('sha512').update(tarball).digest('base64')}`;
  const shasum = createHash('sha1').update(tarball).digest('hex');
  const file = `${NPM_PACKAGE}-${NPM_VERSION}.tgz`;
  const seen: string[] = [];
  const server = http.createServer((req, res) => {
    seen.push(req.url ?? '');
    const url = new URL(req.url ?? '/', 'http://registry');
    if (url.pathname === `/${NPM_PACKAGE}`) {
      const base = `http://${req.headers.host}`;
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(
        JSON.stringify({
          name: NPM_PACKAGE,
          'dist-tags': { latest: NPM_VERSION },
          versions: {
            [NPM_VERSION]: {
              name: NPM_PACKAGE,
              version: NPM_VERSION,
              main: 'index.js',
              dist: { tarball: `${base}/${NPM_PACKAGE}/-/${file}`, integrity, shasum },
            },
          },
        }),
      );
    } else if (url.pathname === `/${NPM_PACKAGE}/-/${file}`) {
      res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': tarball.length });
      res.end(tarball);
    } else {
      res.writeHead(404, { 'Content-Type': 'application/json' });
      res.end('{"error":"not found"}\n');
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    seen,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
