import { spawn, type ChildProcess } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import type { ToolResult } from '../../../../protocol/src/tools';
import { nameChild } from '../../oom/children';
import { JsonLineDecoder, type KernelCommand, type KernelMessage, type KernelStateReport } from './wire';

export type Language = 'python' | 'javascript';

/** How to start one language's kernel process. */
export interface KernelLaunch {
  language: Language;
  command: string;
  args: string[];
  cwd: string;
  env: NodeJS.ProcessEnv;
}

/** What a running cell hears from its kernel. */
export interface CellListener {
  message(msg: Exclude<KernelMessage, { t: 'ready' } | { t: 'tool' }>): void;
  /** Bytes written straight to the process's stdout/stderr (a child process, C code, process.stdout). */
  raw(name: 'stdout' | 'stderr', text: string): void;
  tool(name: string, args: unknown): Promise<ToolResult>;
}

export type CellEnd =
  | { kind: 'done'; status: 'ok' | 'error' | 'interrupted' }
  | { kind: 'exited'; code: number | null; signal: string | null };

export class KernelStartError extends Error {}

/**
 * One long-lived interpreter process and its wire. Runs one cell at a time; a cell ends with
 * the kernel's `done`, or with the process's exit (then the kernel is dead and its state lost).
 */
export class Kernel {
  private readonly child: ChildProcess;
  private readonly toKernel: Writable;
  private listener: CellListener | undefined;
  private finishCell: ((end: CellEnd) => void) | undefined;
  private cellId = 0;
  private exitInfo: { code: number | null; signal: string | null } | undefined;
  readonly exited: Promise<{ code: number | null; signal: string | null }>;
  version = '';
  pid = 0;

  private constructor(
    readonly language: Language,
    launch: KernelLaunch,
    onReady: (err?: Error) => void,
  ) {
    this.child = spawn(launch.command, launch.args, {
      cwd: launch.cwd,
      env: launch.env,
      // stdin closed; stdout/stderr for stray output; fd 3 in, fd 4 out: the wire.
      stdio: ['ignore', 'pipe', 'pipe', 'pipe', 'pipe'],
      // A process group of its own, so a kill also ends what the cell started (!cmd, subprocesses).
      detached: true,
    });
    nameChild(this.child, 'the eval kernel', language);
    this.toKernel = this.child.stdio[3] as Writable;
    this.toKernel.on('error', () => undefined);
    const decoder = new JsonLineDecoder(
      (msg) => this.onMessage(msg as KernelMessage, onReady),
      (line) => this.listener?.raw('stderr', `[kernel sent a malformed message: ${line.slice(0, 200)}]\n`),
    );
    (this.child.stdio[4] as Readable).on('data', (chunk: Buffer) => decoder.push(chunk));
    const early: string[] = [];
    for (const name of ['stdout', 'stderr'] as const) {
      const stream = this.child[name]!;
      stream.setEncoding('utf8');
      stream.on('data', (text: string) => {
        if (this.listener) this.listener.raw(name, text);
        else if (early.join('').length < 4000) early.push(text);
      });
    }
    this.exited = new Promise((resolve) => {
      this.child.on('error', (err) =>
        onReady(new KernelStartError(`could not start the ${language} kernel (${launch.command}): ${err.message}`)),
      );
      this.child.on('exit', (code, signal) => {
        this.exitInfo = { code, signal };
        this.killGroup(); // whatever the cell started goes with the interpreter
        // The cell ends once its last output is read ('close'), or soon after if a process that
        // escaped the group still holds the pipes open.
        const end = () => {
          clearTimeout(fallback);
          onReady(
            new KernelStartError(
              `the ${language} kernel exited while starting (${signal ?? `code ${code}`})${early.length ? `:\n${early.join('').trim()}` : ''}`,
            ),
          );
          this.finishCell?.({ kind: 'exited', code, signal });
          resolve({ code, signal });
        };
        const fallback = setTimeout(end, 500);
        this.child.once('close', end);
      });
    });
  }

  /** Starts the process and waits for its `ready`. */
  static start(launch: KernelLaunch, timeoutMs: number): Promise<Kernel> {
    return new Promise((resolve, reject) => {
      let settled = false;
      let kernel: Kernel | undefined;
      const timer = setTimeout(
        () => onReady(new KernelStartError(`the ${launch.language} kernel did not start within ${timeoutMs / 1000} s`)),
        timeoutMs,
      );
      const onReady = (err?: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (err) {
          kernel?.kill();
          reject(err);
        } else resolve(kernel!);
      };
      kernel = new Kernel(launch.language, launch, onReady);
    });
  }

  get alive(): boolean {
    return !this.exitInfo;
  }

  get busy(): boolean {
    return !!this.finishCell;
  }

  private onMessage(msg: KernelMessage, onReady: (err?: Error) => void): void {
    switch (msg.t) {
      case 'ready':
        this.version = msg.version;
        this.pid = msg.pid;
        onReady();
        return;
      case 'tool': {
        const listener = this.listener;
        const answer = listener
          ? listener.tool(msg.name, msg.args).catch(
              (err: Error): ToolResult => ({
                content: [{ type: 'text', text: `${msg.name} failed: ${err.message}` }],
                isError: true,
              }),
            )
          : Promise.resolve<ToolResult>({
              content: [{ type: 'text', text: 'tool() was called while no cell is running' }],
              isError: true,
            });
        void answer.then((result) => this.send({ t: 'tool_result', id: msg.id, result }));
        return;
      }
      default:
        if (msg.cell !== this.cellId) return; // a straggler from a cell that already ended
        this.listener?.message(msg);
        // One more turn of the event loop lets stdout/stderr bytes already written by the cell
        // (which travel on other pipes) arrive before the cell is closed.
        if (msg.t === 'done') setImmediate(() => this.finishCell?.({ kind: 'done', status: msg.status }));
    }
  }

  private send(cmd: KernelCommand): void {
    if (this.alive && this.toKernel.writable) this.toKernel.write(`${JSON.stringify(cmd)}\n`);
  }

  /** Runs one cell; settles when the kernel reports it done or the process exits. */
  execute(code: string, listener: CellListener): Promise<CellEnd> {
    return this.turn((cell) => ({ t: 'exec', cell, code }), listener);
  }

  /** Sends one command that the kernel answers as a cell (messages with its number, then done). */
  private turn(command: (cell: number) => KernelCommand, listener: CellListener): Promise<CellEnd> {
    if (this.busy) throw new Error(`the ${this.language} kernel is already running a cell`);
    if (this.exitInfo) return Promise.resolve({ kind: 'exited', ...this.exitInfo });
    const cell = ++this.cellId;
    this.listener = listener;
    return new Promise<CellEnd>((resolve) => {
      this.finishCell = (end) => {
        this.finishCell = undefined;
        this.listener = undefined;
        resolve(end);
      };
      this.send(command(cell));
    });
  }

  /**
   * Writes the user's variables to `path` (save_state, at most `limit` bytes) or reads them back
   * into this kernel (load_state). Takes a turn like a cell: the kernel must be idle. Rejects
   * when the kernel fails the command as a whole (it died, or could not open the file).
   */
  async state(
    command: { t: 'save_state'; path: string; limit: number } | { t: 'load_state'; path: string },
  ): Promise<KernelStateReport> {
    let report: KernelStateReport | undefined;
    let failure = '';
    const end = await this.turn((cell) => ({ ...command, cell }), {
      message(msg) {
        if (msg.t === 'state') report = msg.report;
        else if (msg.t === 'error') failure = `${msg.ename}: ${msg.evalue}`;
      },
      raw: () => undefined,
      tool: async () => ({
        content: [{ type: 'text', text: 'no tool calls while the state is saved' }],
        isError: true,
      }),
    });
    if (end.kind === 'exited')
      throw new Error(`the ${this.language} kernel exited (${end.signal ?? `code ${end.code}`}) during ${command.t}`);
    if (!report)
      throw new Error(
        `the ${this.language} kernel could not ${command.t.replace('_', ' ')}: ${failure || 'no report'}`,
      );
    return report;
  }

  /** Imports `modules` ahead of a load_state (import_modules); failures are left for it to name. */
  async importModules(modules: string[]): Promise<void> {
    await this.turn((cell) => ({ t: 'import_modules', cell, modules }), {
      message: () => undefined,
      raw: () => undefined,
      tool: async () => ({
        content: [{ type: 'text', text: 'no tool calls while modules are imported' }],
        isError: true,
      }),
    });
  }

  /** Asks the running cell to stop (KeyboardInterrupt in Python); the state is kept. */
  interrupt(): void {
    if (this.alive) this.child.kill('SIGINT');
  }

  kill(): void {
    if (this.alive) this.killGroup();
  }

  private killGroup(): void {
    if (this.child.pid === undefined) return;
    try {
      process.kill(-this.child.pid, 'SIGKILL');
    } catch {
      if (this.alive) this.child.kill('SIGKILL');
    }
  }

  get executionCount(): number {
    return this.cellId;
  }
}
