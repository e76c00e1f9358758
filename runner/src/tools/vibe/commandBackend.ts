import { spawn, type ChildProcess } from 'node:child_process';
import { logger } from '../../log';
import { WorkerOutput } from './workerOutput';
import type { Worker, WorkerBackend } from './roster';
import type { WorkerStatus } from '../../../../protocol/src/workers';

export interface CommandSpec {
  command: string[];
  env?: Record<string, string>;
  timeoutSeconds?: number;
}

export interface CommandHooks {
  settle(id: string, round: number, status: Exclude<WorkerStatus, 'running'>, result: string): void;
  progress(id: string, round: number, text: string): void;
}

interface Round {
  child: ChildProcess;
  round: number;
  closed: Promise<void>;
}

/** Signals a worker's whole process group; a group already gone is fine. */
function signalGroup(child: ChildProcess, sig: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, sig);
  } catch {
    // ESRCH: nothing left in the group.
  }
}

/**
 * Runs each round of a worker as a configured command inside the run's sandbox, in its
 * workspace, with the brief on stdin. Output (stdout and stderr as they interleave) is kept
 * up to a cap; the exit settles the round. Each round leads its own process group, so a kill
 * takes the whole tree the command started.
 */
export class CommandWorkerBackend implements WorkerBackend {
  readonly kind = 'command' as const;
  private readonly rounds = new Map<string, Round>();

  constructor(
    private readonly spec: CommandSpec,
    private readonly cwd: string,
    private readonly opts: { outputLimitBytes: number; killGraceMs: number },
    private readonly hooks: CommandHooks,
  ) {}

  unavailable(): string | undefined {
    return undefined;
  }

  begin(worker: Worker): void {
    const { id, round } = worker;
    const [cmd, ...args] = this.spec.command;
    const out = new WorkerOutput(this.opts.outputLimitBytes);
    const child = spawn(cmd, args, {
      cwd: this.cwd,
      detached: true,
      stdio: ['pipe', 'pipe', 'pipe'],
      env: {
        ...process.env,
        ...this.spec.env,
        TETHER_WORKER_ID: id,
        TETHER_WORKER_LABEL: worker.label,
        TETHER_WORKER_TIER: worker.tier,
        TETHER_WORKER_ROUND: String(round),
      },
    });
    let timer: NodeJS.Timeout | undefined;
    const closed = new Promise<void>((resolve) => {
      child.once('error', (err) => {
        this.hooks.settle(
          id,
          round,
          'failed',
          `could not start the worker command ${JSON.stringify(cmd)}: ${err.message}`,
        );
        resolve();
      });
      child.once('close', (code, signal) => {
        if (timer) clearTimeout(timer);
        const output = out.text().trimEnd();
        if (code === 0) this.hooks.settle(id, round, 'done', output || '(the worker printed nothing)');
        else
          this.hooks.settle(
            id,
            round,
            'failed',
            `${signal ? `the worker was killed by ${signal}` : `the worker exited with code ${code}`}${output ? `\n${output}` : ''}`,
          );
        resolve();
      });
    }).finally(() => {
      if (this.rounds.get(id)?.child === child) this.rounds.delete(id);
    });
    // Whatever the command left running in its group dies with it.
    child.once('exit', () => signalGroup(child, 'SIGKILL'));
    const onData = (d: Buffer) => {
      out.push(d);
      const line = out.lastLine();
      if (line) this.hooks.progress(id, round, line);
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', (d: Buffer) => out.push(d));
    child.stdin?.on('error', (err) =>
      logger.debug({ worker: id, err: err.message }, 'worker did not read its whole brief'),
    );
    child.stdin?.end(worker.brief);
    if (this.spec.timeoutSeconds) {
      timer = setTimeout(() => {
        this.hooks.settle(
          id,
          round,
          'failed',
          `the worker ran longer than ${this.spec.timeoutSeconds}s and was stopped\n${out.text().trimEnd()}`,
        );
        void this.stopRound(child, closed);
      }, this.spec.timeoutSeconds * 1000);
    }
    this.rounds.set(id, { child, round, closed });
  }

  async stop(worker: Worker): Promise<void> {
    const r = this.rounds.get(worker.id);
    if (r) await this.stopRound(r.child, r.closed);
  }

  /** SIGTERM to the group, SIGKILL after the grace period; resolves once the round closed. */
  private async stopRound(child: ChildProcess, closed: Promise<void>): Promise<void> {
    signalGroup(child, 'SIGTERM');
    const hard = setTimeout(() => signalGroup(child, 'SIGKILL'), this.opts.killGraceMs);
    await closed;
    clearTimeout(hard);
  }
}
