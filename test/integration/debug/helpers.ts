import { execFile, execFileSync, spawn } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import * as path from 'node:path';
import { promisify } from 'node:util';
import assert from 'node:assert/strict';
import { Approval } from '@tether/contract';
import { resultText } from '../../../clients/typescript/src';
import { LABELS } from '../../../gateway/src/sandbox/provider';
import type { TestGateway } from '../../helpers/gateway';

export const FIXTURES = path.resolve(__dirname, '../../../../test/fixtures/debug');

/** The files of a fixture folder, keyed by their path under `prefix`. */
export function fixture(name: string, prefix = ''): Record<string, string> {
  const root = path.join(FIXTURES, name);
  const out: Record<string, string> = {};
  for (const e of readdirSync(root)) {
    const abs = path.join(root, e);
    if (statSync(abs).isFile()) out[path.posix.join(prefix, e)] = readFileSync(abs, 'utf8');
  }
  return out;
}

export interface Reply {
  text: string;
  isError: boolean;
  structured: any;
}

export interface DebugRun {
  runId: string;
  call(args: Record<string, unknown>): Promise<Reply>;
  /** Calls and asserts success. */
  ok(args: Record<string, unknown>): Promise<Reply>;
  /** Calls and asserts an is_error result. */
  fails(args: Record<string, unknown>): Promise<Reply>;
  /** Runs a command in the run's sandbox, in the workspace, and waits for it. */
  exec(argv: string[]): Promise<string>;
  /** Starts a command in the run's sandbox, in the workspace, in a process group of its own; returns the group id. */
  spawnDetached(argv: string[]): Promise<number>;
  /** Kills a process group started by spawnDetached. */
  killGroup(pgid: number): void;
  /** Whether a process of the run's sandbox is alive (a zombie is not). */
  alive(pid: number): Promise<boolean>;
  /** Kills a process of the run's sandbox by pid; throws when there is no such process. */
  kill(pid: number): void;
}

const run = promisify(execFile);

/** The host python with debugpy when the sandbox is a local process; the image's python3 otherwise. */
export function python(t: TestGateway): string {
  return t.config.provider === 'docker' ? 'python3' : '/usr/bin/python3';
}

export async function debugRun(
  t: TestGateway,
  conversationId: string,
  files: Record<string, string>,
): Promise<DebugRun> {
  const created = await t.alice.createRun({
    conversationId,
    features: { debug: true },
    approvals: { exec: Approval.AUTO, write: Approval.AUTO },
  });
  assert.equal(created.error, '');
  const runId = created.runId;
  await t.alice.putFileMap(runId, files);
  const docker = t.config.provider === 'docker';
  const container = () => {
    const id = execFileSync('docker', ['ps', '-q', '--filter', `label=${LABELS.runId}=${runId}`], { encoding: 'utf8' })
      .trim()
      .split('\n')[0];
    assert.ok(id, `no container for run ${runId}`);
    return id;
  };
  const hostWorkspace = path.join(t.config.stateDir, 'workspaces', runId);
  const call = async (args: Record<string, unknown>): Promise<Reply> => {
    const r = await t.alice.callTool(runId, 'debug', args, { deadlineMs: 180_000 });
    return {
      text: resultText(r.result),
      isError: r.result.isError,
      structured: JSON.parse(r.result.structuredJson || '{}'),
    };
  };
  return {
    runId,
    call,
    async ok(args) {
      const r = await call(args);
      assert.equal(r.isError, false, `debug ${JSON.stringify(args)} failed: ${r.text}`);
      return r;
    },
    async fails(args) {
      const r = await call(args);
      assert.equal(r.isError, true, `debug ${JSON.stringify(args)} should fail, got: ${r.text}`);
      return r;
    },
    async exec(argv) {
      const { stdout } = docker
        ? await run('docker', ['exec', '-w', '/workspace', container(), ...argv])
        : await run(argv[0], argv.slice(1), { cwd: hostWorkspace });
      return stdout;
    },
    async spawnDetached(argv) {
      if (!docker) {
        const child = spawn(argv[0], argv.slice(1), { cwd: hostWorkspace, detached: true, stdio: 'ignore' });
        child.unref();
        return child.pid!;
      }
      // Backgrounded by a shell without job control, setsid needs no fork: its pid leads the new group.
      const { stdout } = await run('docker', [
        'exec',
        '-w',
        '/workspace',
        container(),
        'sh',
        '-c',
        'setsid "$@" >/dev/null 2>&1 & echo $!',
        'sh',
        ...argv,
      ]);
      return Number(stdout.trim());
    },
    killGroup(pgid) {
      if (docker) execFileSync('docker', ['exec', container(), 'sh', '-c', `kill -9 -${Number(pgid)}`]);
      else process.kill(-pgid, 'SIGKILL');
    },
    async alive(pid) {
      const script = `s=$(cat /proc/${Number(pid)}/stat 2>/dev/null) || exit 1; case "$s" in *") Z "*) exit 1;; esac`;
      try {
        if (docker) await run('docker', ['exec', container(), 'sh', '-c', script]);
        else await run('sh', ['-c', script]);
        return true;
      } catch {
        return false;
      }
    },
    kill(pid) {
      // The image has no kill binary: the shell's builtin does it.
      if (docker) execFileSync('docker', ['exec', container(), 'sh', '-c', `kill -9 ${Number(pid)}`]);
      else process.kill(pid, 'SIGKILL');
    },
  };
}
