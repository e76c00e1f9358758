import type { Writable } from 'node:stream';
import { AbstractMessageWriter, type Message, type MessageWriter } from 'vscode-jsonrpc/node';

const HEADER = 'Content-Length: ';

/**
 * Writes each JSON-RPC message as one buffer, header and body together, as soon as it is sent.
 * vscode-jsonrpc's own writer queues every message behind a `setImmediate`, then writes the
 * header and the body apart, the second after the first completed: two system calls and two
 * event-loop turns per message on every hop. Stream writes keep their order, so no queue is
 * needed to keep messages whole and in sequence.
 *
 * A failed write is reported (the connection's `onError`) but never rejected: vscode-jsonrpc
 * rethrows a rejected request write where nobody can catch it, and an unhandled rejection ends
 * the process. Whoever must know which messages left sets `onWritten`.
 */
export class FramedMessageWriter extends AbstractMessageWriter implements MessageWriter {
  private errors = 0;
  /** Told of each message once the stream took all of it. */
  onWritten: ((msg: Message) => void) | undefined;

  constructor(private readonly out: Writable) {
    super();
    out.on('error', (err: Error) => this.fireError(err));
    out.on('close', () => this.fireClose());
  }

  write(msg: Message): Promise<void> {
    const json = JSON.stringify(msg);
    const length = Buffer.byteLength(json, 'utf8');
    const head = `${HEADER}${length}\r\n\r\n`;
    const frame = Buffer.allocUnsafe(head.length + length);
    frame.write(head, 0, 'latin1');
    frame.write(json, head.length, 'utf8');
    return new Promise((resolve) => {
      if (this.out.destroyed || this.out.writableEnded) {
        this.fireError(new Error('the stream is closed'), msg, ++this.errors);
        resolve();
        return;
      }
      this.out.write(frame, (err) => {
        if (err) this.fireError(err, msg, ++this.errors);
        else this.onWritten?.(msg);
        resolve();
      });
    });
  }

  end(): void {
    this.out.end();
  }
}
