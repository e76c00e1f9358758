import type { Readable, Writable } from 'node:stream';
import type {
  ProcessEndPayload,
  ProcessInfo,
  ProcessOutputPayload,
  ProcessSignalName,
  ProcessStream,
  PtySize,
} from '../../../../protocol/src/process';
import { logger } from '../../log';
import { OutputBatcher } from './batcher';
import type { Launched } from './launch';
import { Refusal } from './refusal';
import { signalGroup, signalSession } from './signals';

/** Where a process's events go: the run's event stream. */
export interface ProcessSink {
  output(payload: ProcessOutputPayload): void;
  end(payload: ProcessEndPayload): void;
}

export interface ProcessLimits {
  /** Output bytes over all its streams; past them the process is killed. */
  maxOutputBytes: number;
  /** Killed after this long; 0: never. */
  timeoutMs: number;
}

/** Input a process may leave unread before more is refused. */
export const MAX_PENDING_INPUT = 8 * 1024 * 1024;
/**
 * Once the family killed a process, how long its output pipes may stay open (held by something
 * that left its group) before they are cut and the end is sent anyway.
 */
const KILLED_DRAIN_MS = 1000;
/** The PTY helper's own complaints kept for the log. */
const MAX_HELPER_LOG = 4096;

/**
 * One process the family started: forwards its output (coalesced, up to the cap), takes its
 * input, signals its group, and sends its end once it exited and its output pipes closed, after
 * the last of its output.
 */
export class ManagedProcess {
  readonly pid: number;
  /** Settles once the end was sent. */
  readonly ended: Promise<void>;
  private readonly batcher: OutputBatcher;
  private readonly stdin: Writable | null;
  private readonly control: Writable | undefined;
  private exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  private openOutputs = 2;
  private outputBytes = 0;
  private capped = false;
  private killed = false;
  private error: string | undefined;
  private stdinOpen: boolean;
  private timer: NodeJS.Timeout | undefined;
  private drainTimer: NodeJS.Timeout | undefined;
  private resolveEnded!: () => void;

  constructor(
    private readonly launched: Launched,
    readonly info: ProcessInfo,
    private readonly hasStdin: boolean,
    private readonly limits: ProcessLimits,
    private readonly sink: ProcessSink,
  ) {
    const { child } = launched;
    this.pid = child.pid;
    this.ended = new Promise((resolve) => (this.resolveEnded = resolve));
    this.batcher = new OutputBatcher((stream, data) =>
      sink.output({ pid: this.pid, stream, data: data.toString('base64') }),
    );
    this.stdin = child.stdin;
    this.control = info.pty ? (child.stdio[3] as Writable) : undefined;
    this.stdinOpen = hasStdin && !!this.stdin;
    this.stdin?.on('error', () => (this.stdinOpen = false));
    if (this.stdin && !hasStdin) this.stdin.end();
    if (this.control) {
      this.control.on('error', () => undefined);
      // Nothing more is expected from the helper on fd 3; read it so it never fills.
      (this.control as unknown as Readable).on('data', () => undefined);
    }
    child.on('error', (err) => logger.warn({ pid: this.pid, err: err.message }, 'process error'));

    const out = child.stdout!;
    const err = child.stderr!;
    this.follow(out, info.pty ? 'pty' : 'stdout');
    if (info.pty) {
      let logged = 0;
      err.on('data', (d: Buffer) => {
        if (logged >= MAX_HELPER_LOG) return;
        logged += d.length;
        logger.warn({ pid: this.pid, text: d.toString('utf8', 0, MAX_HELPER_LOG) }, 'PTY helper');
      });
      err.on('error', () => undefined);
      err.once('close', () => this.outputClosed());
    } else this.follow(err, 'stderr');

    child.once('exit', (code, signal) => {
      this.exit = { code, signal };
      if (this.killed) this.cutAfterDrain();
      this.maybeEnd();
    });
    if (limits.timeoutMs > 0)
      this.timer = setTimeout(
        () => this.kill(`timed out after ${limits.timeoutMs} ms: the process group was killed`),
        limits.timeoutMs,
      );
  }

  private follow(stream: Readable, name: ProcessStream): void {
    stream.on('data', (chunk: Buffer) => this.output(name, chunk));
    stream.on('error', () => undefined);
    stream.once('close', () => this.outputClosed());
  }

  private output(stream: ProcessStream, chunk: Buffer): void {
    if (this.capped) return;
    const room = this.limits.maxOutputBytes - this.outputBytes;
    if (chunk.length <= room) {
      this.outputBytes += chunk.length;
      this.batcher.push(stream, chunk);
      return;
    }
    this.batcher.push(stream, chunk.subarray(0, room));
    this.outputBytes = this.limits.maxOutputBytes;
    this.capped = true;
    this.kill(`output exceeded ${this.limits.maxOutputBytes} bytes: the process was killed`);
  }

  private outputClosed(): void {
    this.openOutputs--;
    this.maybeEnd();
  }

  private maybeEnd(): void {
    if (!this.exit || this.openOutputs > 0) return;
    clearTimeout(this.timer);
    clearTimeout(this.drainTimer);
    this.batcher.flush();
    this.stdinOpen = false;
    this.stdin?.destroy();
    this.control?.destroy();
    const { code, signal } = this.exit;
    this.sink.end({
      pid: this.pid,
      exitCode: code ?? -1,
      ...(signal ? { signal } : {}),
      ...(this.error ? { error: this.error } : {}),
    });
    this.resolveEnded();
  }

  /** Whether it exited (its output may still be draining). */
  get exited(): boolean {
    return this.exit !== undefined;
  }

  input(data: Buffer): void {
    this.assertRunning();
    if (!this.hasStdin) throw new Refusal('invalid', `process ${this.pid} was started without stdin`);
    if (!this.stdinOpen || !this.stdin) throw new Refusal('invalid', `the stdin of process ${this.pid} is closed`);
    if (this.stdin.writableLength > MAX_PENDING_INPUT)
      throw new Refusal(
        'limit',
        `process ${this.pid} is not reading its input: ${this.stdin.writableLength} bytes are still waiting for it`,
      );
    this.stdin.write(data);
  }

  closeStdin(): void {
    this.assertRunning();
    if (!this.hasStdin) throw new Refusal('invalid', `process ${this.pid} was started without stdin`);
    this.stdinOpen = false;
    this.stdin?.end();
  }

  resize(size: PtySize): void {
    this.assertRunning();
    if (!this.control) throw new Refusal('invalid', `process ${this.pid} is not on a PTY`);
    this.control.write(`${size.cols} ${size.rows}\n`);
  }

  /** A signal to the process's group (a PTY's: every process of its session). */
  signal(sig: ProcessSignalName): void {
    this.signalTree(sig, false);
  }

  /** Kills everything the process started, saying why in its end. */
  kill(reason?: string): void {
    if (reason && !this.error) this.error = reason;
    this.killed = true;
    try {
      this.signalTree('SIGKILL', true);
    } catch (err) {
      logger.warn({ pid: this.pid, err: (err as Error).message }, 'could not kill a process group');
    }
    if (this.exit) this.cutAfterDrain();
  }

  private signalTree(sig: NodeJS.Signals, withHelper: boolean): void {
    const leader = this.launched.sessionLeader;
    if (leader === undefined) {
      signalGroup(this.pid, sig);
      return;
    }
    signalSession(leader, sig);
    // The helper passes its command's end on; only a kill takes it down with it.
    if (withHelper) signalGroup(this.pid, sig);
  }

  private cutAfterDrain(): void {
    this.drainTimer ??= setTimeout(() => {
      this.launched.child.stdout?.destroy();
      this.launched.child.stderr?.destroy();
    }, KILLED_DRAIN_MS);
  }

  private assertRunning(): void {
    if (this.exit) throw new Refusal('not_found', `process ${this.pid} has exited`);
  }
}
