import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';

// E2B's own SDKs, installed from the registries into the test's own venv and node_modules,
// drive a gateway on the real engine and runner image through nothing but E2B's configuration.
const ROOT = path.resolve(__dirname, '../../../..');
const SRC = path.join(ROOT, 'test/integration/e2b');
const KEYS = {
  alice: `e2b_${'a1'.repeat(20)}`,
  bob: `e2b_${'b2'.repeat(20)}`,
};
let t: TestGateway;

/** A venv with the pinned SDKs, rebuilt only when the pins change. */
function pythonSdk(): string {
  const req = path.join(SRC, 'python/requirements.txt');
  const hash = createHash('sha256').update(readFileSync(req)).digest('hex').slice(0, 12);
  const venv = path.join(ROOT, '.tether/e2b-venv', hash);
  const python = path.join(venv, 'bin/python');
  if (!existsSync(path.join(venv, '.installed'))) {
    mkdirSync(path.dirname(venv), { recursive: true });
    execFileSync('python3', ['-m', 'venv', venv], { stdio: 'inherit' });
    execFileSync(python, ['-m', 'pip', 'install', '-q', '-r', req], { stdio: 'inherit', timeout: 600_000 });
    writeFileSync(path.join(venv, '.installed'), hash);
  }
  return python;
}

/** The JavaScript SDKs in the scenario's own node_modules, from its lockfile. */
function jsSdk(): string {
  const dir = path.join(SRC, 'js');
  const lock = readFileSync(path.join(dir, 'package-lock.json'));
  const stamp = path.join(dir, 'node_modules/.tether-lock');
  const hash = createHash('sha256').update(lock).digest('hex');
  if (!existsSync(stamp) || readFileSync(stamp, 'utf8') !== hash) {
    execFileSync('npm', ['ci', '--no-audit', '--no-fund'], { cwd: dir, stdio: 'inherit', timeout: 600_000 });
    writeFileSync(stamp, hash);
  }
  return dir;
}

interface Outcome {
  code: number | null;
  checks: Record<string, Record<string, unknown>>;
  failed?: string;
  stderr: string;
}

/** Runs a scenario with E2B's variables pointed at the gateway; resolves with its checks. */
function scenario(cmd: string, args: string[], cwd: string): Promise<Outcome> {
  const http = `http://${t.gateway.httpAddress}`;
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd,
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        E2B_API_URL: http,
        E2B_SANDBOX_URL: http,
        E2B_API_KEY: KEYS.alice,
        OTHER_TENANT_KEY: KEYS.bob,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 300_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      const checks: Outcome['checks'] = {};
      let failed: string | undefined;
      for (const line of out.split('\n').filter((l) => l.startsWith('{'))) {
        const j = JSON.parse(line) as { check?: string; failed?: string };
        if (j.check) checks[j.check] = j;
        if (j.failed) failed = j.failed;
      }
      // What each check measured goes into the suite's log (create and resume times).
      console.log(JSON.stringify({ scenario: args.at(-1), checks: Object.values(checks) }));
      resolve({ code, checks, failed, stderr });
    });
  });
}

before(async () => {
  t = await startTestGateway({
    tokens: { ...{ 'token-alice': 'alice', 'token-bob': 'bob' }, [KEYS.alice]: 'alice', [KEYS.bob]: 'bob' },
    http: { listen: '127.0.0.1:0' },
    // A small output cap, so the huge-output check ends quickly.
    runner: { process: { maxOutputBytes: 1024 * 1024 } },
  });
});
after(async () => {
  await t?.close();
});

test("E2B's Python SDKs: files, watch, commands, PTY, run_code, bad inputs, pause and resume, kill", async () => {
  const python = pythonSdk();
  const r = await scenario(python, [path.join(SRC, 'python/scenario.py')], SRC);
  assert.equal(r.failed, undefined, `${r.failed}\n${r.stderr.slice(-3000)}`);
  assert.equal(r.code, 0, r.stderr.slice(-3000));
  for (const name of ['create', 'files', 'watch', 'commands', 'pty', 'run_code', 'bad_inputs', 'pause_resume', 'kill'])
    assert.ok(r.checks[name], `check ${name} ran`);
  // Nothing of the sandbox is left: the run is gone for tether's own API too.
  const id = String(r.checks.create!.sandbox_id);
  assert.ok(!(await t.alice.listRuns()).some((run) => run.runId === id));
});

test("E2B's JavaScript SDKs: files, watch, commands, PTY, runCode, bad inputs, kill", async () => {
  const dir = jsSdk();
  const r = await scenario(process.execPath, [path.join(dir, 'scenario.mjs')], dir);
  assert.equal(r.code, 0, r.stderr.slice(-3000));
  for (const name of ['create', 'files', 'watch', 'commands', 'pty', 'run_code', 'bad_inputs', 'kill'])
    assert.ok(r.checks[name], `check ${name} ran`);
});
