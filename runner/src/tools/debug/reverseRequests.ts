import { spawn, type ChildProcess } from 'node:child_process';
import type { DebugProtocol } from '@vscode/debugprotocol';
import type { ReverseRequestHandler } from './dapClient';
import type { OutputBuffer } from './outputBuffer';
import { nameChild } from '../../oom/children';

/**
 * Answers the requests an adapter sends to its client. `runInTerminal` runs the command as a
 * plain child process right here (inside the run's sandbox), its output captured like the
 * debuggee's; `startDebugging` is refused in words, since a conversation has exactly one session.
 */
export class ReverseRequests {
  private readonly children = new Set<ChildProcess>();

  constructor(
    private readonly output: OutputBuffer,
    private readonly baseEnv: NodeJS.ProcessEnv = process.env,
  ) {}

  readonly handler: ReverseRequestHandler = async (request) => {
    switch (request.command) {
      case 'runInTerminal':
        return this.runInTerminal((request as DebugProtocol.RunInTerminalRequest).arguments);
      case 'startDebugging':
        throw new Error(
          'tether runs one debug session per conversation and does not start child sessions (startDebugging refused)',
        );
      default:
        throw new Error(`tether does not handle the reverse request "${request.command}"`);
    }
  };

  private runInTerminal(
    args: DebugProtocol.RunInTerminalRequestArguments,
  ): Promise<DebugProtocol.RunInTerminalResponse['body']> {
    if (!Array.isArray(args?.args) || args.args.length === 0 || typeof args.args[0] !== 'string') {
      return Promise.reject(new Error('runInTerminal needs a command in args[0]'));
    }
    const env = { ...this.baseEnv };
    for (const [k, v] of Object.entries(args.env ?? {})) {
      if (v === null) delete env[k];
      else env[k] = v;
    }
    return new Promise((resolve, reject) => {
      const child = spawn(args.args[0], args.args.slice(1), {
        cwd: args.cwd || undefined,
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
        detached: true,
      });
      child.once('error', (err) => reject(new Error(`runInTerminal could not start ${args.args[0]}: ${err.message}`)));
      child.once('spawn', () => {
        nameChild(child, 'the debugged program', args.args[0].split('/').pop());
        this.children.add(child);
        child.once('exit', () => this.children.delete(child));
        child.stdout!.on('data', (d: Buffer) => this.output.push('stdout', d.toString()));
        child.stderr!.on('data', (d: Buffer) => this.output.push('stderr', d.toString()));
        resolve({ processId: child.pid });
      });
    });
  }

  /** Ends whatever runInTerminal started. */
  killAll(): void {
    for (const child of this.children) {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        child.kill('SIGKILL');
      }
    }
    this.children.clear();
  }
}
