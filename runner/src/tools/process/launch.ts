import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsc } from 'node:fs';
import * as path from 'node:path';
import type { Readable } from 'node:stream';
import type { PtySize } from '../../../../protocol/src/process';
import { runnerFile } from '../../files';
import { Refusal } from './refusal';

/** The PTY helper, shipped beside the compiled family (scripts/copy-assets.sh). */
export const PTY_HOST = runnerFile('tools/process/ptyhost.py');

/** Longest the PTY helper may take to say its command runs. */
const PTY_START_MS = 10_000;

export interface LaunchSpec {
  cmd: string;
  args: string[];
  cwd: string;
  env: NodeJS.ProcessEnv;
  /** Keep stdin as a pipe (otherwise the process reads /dev/null; a PTY gets an EOT). */
  stdin: boolean;
  pty: PtySize | undefined;
  /** The Python that runs the PTY helper, absolute. */
  python: string;
}

export interface Launched {
  child: ChildProcess & { pid: number };
  /** For a PTY: the command's own pid under the helper, leader of the PTY's session. */
  sessionLeader?: number;
}

/** An executable found on the runner's own PATH, absolute, so that a process's env cannot move it. */
export function onPath(name: string, PATH = process.env.PATH ?? ''): string {
  if (name.includes('/')) return path.resolve(name);
  for (const dir of PATH.split(':')) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    try {
      accessSync(candidate, fsc.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return name;
}

/**
 * Starts a process in a process group (and session) of its own: on pipes, or on a PTY through
 * the helper. Resolves once it runs; a command that cannot start is refused with the reason.
 */
export async function launch(spec: LaunchSpec): Promise<Launched> {
  const [file, args, stdio] = spec.pty
    ? [spec.python, [PTY_HOST, String(spec.pty.cols), String(spec.pty.rows), '--', spec.cmd, ...spec.args], 4]
    : [spec.cmd, spec.args, 3];
  let child: ChildProcess;
  try {
    child = spawn(file, args, {
      cwd: spec.cwd,
      env: spec.env,
      detached: true,
      stdio: stdio === 4 ? ['pipe', 'pipe', 'pipe', 'pipe'] : [spec.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
    });
  } catch (err) {
    throw spawnRefusal(err, spec.cmd);
  }
  try {
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
  } catch (err) {
    throw spec.pty && (err as NodeJS.ErrnoException).code === 'ENOENT'
      ? new Refusal('failed', `a PTY needs Python 3 for its helper, and ${spec.python} was not found`)
      : spawnRefusal(err, spec.cmd);
  }
  const started = child as ChildProcess & { pid: number };
  if (!spec.pty) return { child: started };
  try {
    const line = await firstLine(started.stdio[3] as Readable, started);
    const pid = /^pid (\d+)$/.exec(line);
    if (pid) return { child: started, sessionLeader: Number(pid[1]) };
    const error = /^error (\w+) (.*)$/.exec(line);
    throw error ? spawnRefusal(Object.assign(new Error(error[2]), { code: error[1] }), spec.cmd) : new Error(line);
  } catch (err) {
    started.kill('SIGKILL');
    for (const s of started.stdio) s?.destroy();
    if (err instanceof Refusal) throw err;
    throw new Refusal('failed', `the PTY helper did not start ${spec.cmd}: ${(err as Error).message}`);
  }
}

/** The helper's first control line (fd 3), or why there is none. */
function firstLine(control: Readable, child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let buf = '';
    let stderr = '';
    let settled = false;
    const timer = setTimeout(() => done(new Error(`no answer in ${PTY_START_MS} ms`)), PTY_START_MS);
    const onData = (d: Buffer) => {
      buf += d.toString('utf8');
      const nl = buf.indexOf('\n');
      if (nl >= 0) done(undefined, buf.slice(0, nl));
      else if (buf.length > 4096) done(new Error('an unreadable answer'));
    };
    const onErr = (d: Buffer) => {
      if (stderr.length < 4096) stderr += d.toString('utf8');
    };
    // fd 3 ends when the helper exits (its command never holds it): without a line, say how it ended.
    const onEnd = () => {
      const why = () =>
        done(
          new Error(
            `it exited (${child.signalCode ?? `code ${child.exitCode}`}) before its command ran${stderr ? `: ${stderr.trim()}` : ''}`,
          ),
        );
      if (child.exitCode !== null || child.signalCode !== null) why();
      else child.once('exit', why);
    };
    function done(err: Error | undefined, line?: string) {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      control.off('data', onData);
      child.stderr?.off('data', onErr);
      control.off('end', onEnd);
      if (err) reject(err);
      else resolve(line!);
    }
    control.on('data', onData);
    child.stderr?.on('data', onErr);
    control.once('end', onEnd);
  });
}

function spawnRefusal(err: unknown, cmd: string): Refusal {
  const e = err as NodeJS.ErrnoException;
  switch (e.code) {
    case 'ENOENT':
      return new Refusal('not_found', `no such command: ${cmd}`);
    case 'EACCES':
      return new Refusal('failed', `cannot run ${cmd}: permission denied`);
    case 'ENOEXEC':
      return new Refusal('failed', `cannot run ${cmd}: not an executable format`);
    case 'ERR_INVALID_ARG_TYPE':
    case 'ERR_INVALID_ARG_VALUE':
      return new Refusal('invalid', e.message);
    default:
      return new Refusal('failed', `cannot run ${cmd}: ${e.message ?? String(err)}`);
  }
}
