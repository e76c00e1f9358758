import type { MessageConnection } from 'vscode-jsonrpc/node';
import { FramedMessageReader, FramedMessageWriter } from '../../../protocol/src/framing';
import type { Sessions } from './sessions';

/**
 * The runner's own stdio: its first connection, trusted because only whoever started the
 * runner writes to it. The container's init holds the same pipes, though, and where code in
 * the run can open them (`/proc/1/fd/0` of a readable init), words arriving on stdin could be
 * anyone's. So once a connection has passed the socket's challenge, stdio is retired for good:
 * what arrives on stdin is drained unread and nothing more is written to stdout. Its end still
 * ends the runner: whoever started it is gone.
 */
export class RunnerStdio {
  private connection: MessageConnection | undefined;
  private retired = false;

  constructor(
    private readonly sessions: Sessions,
    private readonly onEnd: () => void,
  ) {}

  serve(): void {
    if (this.retired) return;
    this.connection = this.sessions.serve(
      new FramedMessageReader(process.stdin),
      new FramedMessageWriter(process.stdout),
      'stdio',
      process.stdin,
      this.onEnd,
    );
  }

  retire(): void {
    if (this.retired) return;
    this.retired = true;
    if (this.connection) this.sessions.retire(this.connection, 'stdio', 'a socket connection passed the challenge');
    process.stdin.on('data', () => undefined);
    process.stdin.once('close', this.onEnd);
    process.stdin.resume();
  }
}
