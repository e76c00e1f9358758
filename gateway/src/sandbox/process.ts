import { spawn, type ChildProcess } from 'node:child_process';
import { promises as fs, existsSync } from 'node:fs';
import * as path from 'node:path';
import { PassThrough, type Readable } from 'node:stream';
import { logger } from '../log';
import { bootRunner, runSecret, socketDir } from './boot';
import type {
  ProviderCapabilities,
  Sandbox,
  SandboxExit,
  SandboxInfo,
  SandboxProvider,
  SandboxSpec,
  SandboxUsage,
} from './provider';
import { extractConfined, packConfined } from './safeTar';

/** The built runner entry point, found relative to this file in dist/. */
export function runnerEntry(): string {
  const p = path.resolve(__dirname, '../../../runner/src/main.js');
  if (!existsSync(p)) throw new Error(`runner not built: ${p} is missing (run npm run build)`);
  return p;
}

interface Child {
  proc: ChildProcess;
  secret: Buffer;
  socket?: { path: string } | { host: string; port: number };
  noSocketReason?: string;
  spec: SandboxSpec;
  workspace: string;
  ownsWorkspace: boolean;
  exited: Promise<SandboxExit>;
}

/**
 * Runs the runner as a local child process in a temp workspace. No isolation at all: for
 * development and fast tests only, and refused unless the config enables it.
 */
export class ProcessProvider implements SandboxProvider {
  readonly name = 'process';
  /** No templates: a template is an image, and this provider runs no images. */
  readonly capabilities: ProviderCapabilities = {
    sharedState: false,
    keepsRunsOnShutdown: false,
    egress: { carried: false, reason: 'the process provider cannot carry egress (only the docker provider can)' },
    pool: 'local',
  };
  private readonly children = new Map<string, Child>();

  constructor(
    private readonly stateDir: string,
    private readonly fastPath = true,
    /** `tcp`: the runner listens on a free loopback port instead of a socket file (as in a pod with an address). */
    private readonly listenOn: 'unix' | 'tcp' = 'unix',
  ) {}

  async create(spec: SandboxSpec): Promise<Sandbox> {
    const ownsWorkspace = !spec.hostWorkspace;
    const workspace = spec.hostWorkspace ?? path.join(this.stateDir, 'workspaces', spec.runId);
    await fs.mkdir(workspace, { recursive: true });
    const proc = spawn(process.execPath, [runnerEntry()], {
      cwd: workspace,
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...process.env, TETHER_RUN_ID: spec.runId, TETHER_WORKSPACE: workspace },
    });
    const id = `proc-${spec.runId}`;
    const exited = new Promise<SandboxExit>((resolve) => {
      proc.once('exit', (code, signal) =>
        resolve({
          reason: signal ? `runner killed by ${signal}` : `runner exited with code ${code}`,
          oomKilled: false,
          exitCode: code,
        }),
      );
      proc.once('error', (err) =>
        resolve({ reason: `runner failed to start: ${err.message}`, oomKilled: false, exitCode: null }),
      );
    });
    proc.stderr!.on('data', (d: Buffer) => logger.debug({ runId: spec.runId, runner: d.toString().trimEnd() }));
    const secret = await runSecret(this.stateDir, spec.runId);
    const child: Child = { proc, spec, workspace, ownsWorkspace, exited, secret };
    this.children.set(id, child);
    const sockets = socketDir(this.stateDir, spec.runId);
    const tcp = this.fastPath && this.listenOn === 'tcp';
    if (this.fastPath && !tcp) await fs.mkdir(sockets, { recursive: true, mode: 0o700 });
    const want = !this.fastPath
      ? {}
      : tcp
        ? { tcp: { host: '127.0.0.1', port: 0 } }
        : { unix: path.join(sockets, 'runner.sock') };
    try {
      const hello = await bootRunner(proc.stdin!, proc.stdout!, secret, want, 30_000);
      if (hello.listening.unix) child.socket = { path: hello.listening.unix };
      else if (hello.listening.tcp) child.socket = hello.listening.tcp;
      else
        child.noSocketReason = this.fastPath
          ? hello.errors.join('; ') || 'the runner did not listen'
          : 'fastPath is off';
    } catch (err) {
      await this.remove(id).catch(() => undefined);
      throw new Error(`the runner did not start: ${(err as Error).message}`);
    }
    return this.sandbox(id);
  }

  private sandbox(id: string): Sandbox {
    const c = this.children.get(id);
    if (!c) throw new Error(`no such sandbox ${id}`);
    return {
      id,
      runId: c.spec.runId,
      workspacePath: c.workspace,
      secret: c.secret,
      socket: c.socket,
      noSocketReason: c.noSocketReason,
      stdio: async () => ({ stdin: c.proc.stdin!, stdout: c.proc.stdout! }),
      exited: c.exited,
      putArchive: (rel, tar) => extractConfined(c.workspace, rel, tar),
      getArchive: async (rel) => {
        await fs.lstat(path.join(c.workspace, rel || '.'));
        const out = new PassThrough();
        (packConfined(c.workspace, rel) as Readable).pipe(out);
        return out;
      },
      usage: () => processUsage(c.proc.pid),
    };
  }

  async attach(id: string): Promise<Sandbox> {
    // A child process does not outlive the gateway that spawned it.
    return this.sandbox(id);
  }

  async stop(id: string): Promise<void> {
    const c = this.children.get(id);
    if (!c || c.proc.exitCode !== null || c.proc.signalCode !== null) return;
    c.proc.kill('SIGTERM');
    const timer = setTimeout(() => c.proc.kill('SIGKILL'), 3000);
    await c.exited;
    clearTimeout(timer);
  }

  async remove(id: string): Promise<void> {
    const c = this.children.get(id);
    if (!c) return;
    await this.stop(id);
    this.children.delete(id);
    if (c.ownsWorkspace) await fs.rm(c.workspace, { recursive: true, force: true });
    await fs.rm(socketDir(this.stateDir, c.spec.runId), { recursive: true, force: true });
  }

  async list(labels: Record<string, string>): Promise<SandboxInfo[]> {
    return [...this.children.entries()]
      .filter(([, c]) => Object.entries(labels).every(([k, v]) => c.spec.labels[k] === v))
      .map(([id, c]) => ({
        id,
        labels: c.spec.labels,
        running: c.proc.exitCode === null && c.proc.signalCode === null,
      }));
  }

  async close(): Promise<void> {
    await Promise.all([...this.children.keys()].map((id) => this.remove(id)));
  }
}

/** The runner process's own resident memory and CPU time, from /proc (Linux; its children are not counted). */
async function processUsage(pid: number | undefined): Promise<SandboxUsage> {
  if (!pid) throw new Error('the runner process has no pid');
  const [status, stat] = await Promise.all([
    fs.readFile(`/proc/${pid}/status`, 'utf8'),
    fs.readFile(`/proc/${pid}/stat`, 'utf8'),
  ]);
  const rssKb = Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? 0);
  // Fields after the command name, which may hold spaces: utime and stime are the 12th and 13th.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return { diskBytes: 0, memoryBytes: rssKb * 1024, cpuMillis: ticks * 10 };
}
