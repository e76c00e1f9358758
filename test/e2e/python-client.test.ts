import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, mkdirSync, mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startTestGateway, type TestGateway } from '../helpers/gateway';

const ROOT = path.resolve(__dirname, '../../..');
// Debian's interpreter: python3-grpcio and python3-protobuf are installed for it, not for
// whatever python3 comes first on PATH.
const PYTHON = '/usr/bin/python3';

let t: TestGateway;
before(async () => {
  t = await startTestGateway({ provider: 'process' });
});
after(async () => t?.close());

test('a Python client generated from proto/ creates a run, lists tools on two surfaces and calls read', async () => {
  assert.ok(existsSync('/usr/bin/grpc_python_plugin'), 'protobuf-compiler-grpc is installed by scripts/setup.sh');
  const out = mkdtempSync(path.join(os.tmpdir(), 'tether-py-'));
  mkdirSync(out, { recursive: true });
  execFileSync('protoc', [
    `-I${path.join(ROOT, 'proto')}`,
    '-I/usr/include',
    `--python_out=${out}`,
    `--grpc_python_out=${out}`,
    '--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin',
    'tether/v1/gateway.proto',
  ]);
  // Asynchronously: the gateway under test runs on this process's event loop.
  const res = await promisify(execFile)(PYTHON, [path.join(ROOT, 'test/python/client_test.py')], {
    encoding: 'utf8',
    env: {
      ...process.env,
      TETHER_PY_GEN: out,
      TETHER_ADDRESS: t.gateway.address,
      TETHER_TOKEN: 'token-alice',
      PYTHONPATH: '',
    },
    timeout: 60_000,
  }).catch((err: { stdout: string; stderr: string }) =>
    assert.fail(`python client failed:\n${err.stdout}\n${err.stderr}`),
  );
  assert.match(res.stdout, /python client: all checks passed/);
});
