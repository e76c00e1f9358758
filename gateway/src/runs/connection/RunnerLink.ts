import { logger } from '../../log';
import type { Sandbox } from '../../sandbox/provider';
import { connectSocket, connectStdio, connectStream, type Channel } from './channel';

/**
 * Opens connections to one run's runner: through its socket when the sandbox has one (no
 * engine in the path), else through its stdio. Why the socket could not be used is logged
 * once per run; stdio, once taken, is the run's transport from then on. Once the socket has
 * been used it is the only way: the runner has retired its stdio (code in the run may be able
 * to write there), so a failed connection or challenge is an error, never a fall back.
 */
export class RunnerLink {
  private fellBack = false;
  private socketUsed = false;

  constructor(readonly sandbox: Sandbox) {}

  async open(): Promise<Channel> {
    const { socket, secret, dial } = this.sandbox;
    // A relayed socket or a pod's TCP address (Kubernetes) has no stdio to fall back to: its
    // errors are the caller's.
    if (dial) return connectStream(await dial.call(this.sandbox), secret);
    if (socket && (this.sandbox.socketOnly || this.socketUsed))
      return connectSocket(socket, secret).catch((err: Error) => {
        throw new Error(
          `${err.message} (the socket is this run's only transport: its stdio is not used once a socket was)`,
        );
      });
    if (socket && !this.fellBack) {
      try {
        const channel = await connectSocket(socket, secret);
        this.socketUsed = true;
        return channel;
      } catch (err) {
        this.fallBack(`connecting to the runner's socket failed: ${(err as Error).message}`);
      }
    } else if (!this.fellBack) {
      this.fallBack(this.sandbox.noSocketReason ?? 'the sandbox has no socket');
    }
    return connectStdio(this.sandbox);
  }

  /** Whether a dropped connection can be opened again (a stdio stream cannot). */
  get reconnectable(): boolean {
    return !this.fellBack;
  }

  private fallBack(reason: string): void {
    this.fellBack = true;
    logger.warn({ runId: this.sandbox.runId, reason }, 'runner transport: using stdio');
  }
}
