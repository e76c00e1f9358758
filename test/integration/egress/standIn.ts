import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';

/** What the stand-in package index serves, and what it saw. */
export interface StandInIndex {
  port: number;
  /** Request paths, in order. */
  seen: string[];
  close(): Promise<void>;
}

export const PACKAGE = 'tetherdemo';
export const PACKAGE_VALUE = 'served by the stand-in index';

/** A one-package wheel, written by the host's python3 (a wheel is a zip with a RECORD). */
function buildWheel(dir: string): string {
  const file = path.join(dir, `${PACKAGE}-0.1-py3-none-any.whl`);
  const script = `
import base64, hashlib, sys, zipfile
name = ${JSON.stringify(PACKAGE)}
files = {
    name + '/__init__.py': b'VALUE = ${JSON.stringify(PACKAGE_VALUE)}\\n',
    name + '-0.1.dist-info/METADATA': ('Metadata-Version: 2.1\\nName: ' + name + '\\nVersion: 0.1\\n').encode(),
    name + '-0.1.dist-info/WHEEL': b'Wheel-Version: 1.0\\nGenerator: tether-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n',
}
record = []
for n, d in files.items():
    h = base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()
    record.append(n + ',sha256=' + h + ',' + str(len(d)))
record.append(name + '-0.1.dist-info/RECORD,,')
files[name + '-0.1.dist-info/RECORD'] = ('\\n'.join(record) + '\\n').encode()
with zipfile.ZipFile(sys.argv[1], 'w') as z:
    for n, d in files.items():
        z.writestr(n, d)
`;
  execFileSync('python3', ['-c', script, file]);
  return file;
}

/**
 * A PyPI "simple" index on loopback serving one wheel: the stand-in internet of the egress
 * tests. The gateway's proxy reaches it through names mapped to 127.0.0.1 by egress.testHosts.
 */
export async function startStandInIndex(): Promise<StandInIndex> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-index-'));
  const wheel = readFileSync(buildWheel(dir));
  rmSync(dir, { recursive: true, force: true });
  const wheelName = `${PACKAGE}-0.1-py3-none-any.whl`;
  const sha = createHash('sha256').update(wheel).digest('hex');
  const seen: string[] = [];
  const server = http.createServer((req, res) => {
    seen.push(req.url ?? '');
    const url = new URL(req.url ?? '/', 'http://index');
    if (url.pathname === `/simple/${PACKAGE}/`) {
      res.writeHead(200, { 'Content-Type': 'text/html' });
      res.end(
        `<!DOCTYPE html><html><body><a href="/packages/${wheelName}#sha256=${sha}">${wheelName}</a></body></html>\n`,
      );
    } else if (url.pathname === `/packages/${wheelName}`) {
      res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': wheel.length });
      res.end(wheel);
    } else {
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      res.end('not here\n');
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    seen,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
