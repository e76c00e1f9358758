import type { Readable, Writable } from 'node:stream';
import {
  AbstractMessageReader,
  AbstractMessageWriter,
  type DataCallback,
  type Disposable,
  type Message,
  type MessageReader,
  type MessageWriter,
} from 'vscode-jsonrpc/node';

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

const HEADER_END = Buffer.from('\r\n\r\n', 'latin1');

/**
 * Reads Content-Length framed JSON-RPC messages and hands each to the connection as soon as
 * its last byte arrived. vscode-jsonrpc's own reader passes every message through a semaphore
 * that waits a `setImmediate`, then two awaited decode steps: an extra event-loop turn and a
 * chain of promises per message on every hop. Framing is read the same way (headers up to a
 * blank line, `Content-Length` required, other headers ignored, the body decoded as UTF-8 JSON),
 * and a malformed header or body is reported on `onError`, as it was.
 */
export class FramedMessageReader extends AbstractMessageReader implements MessageReader {
  private callback: DataCallback | undefined;
  /** Bytes received and not yet consumed, in arrival order. */
  private chunks: Buffer[] = [];
  private buffered = 0;
  /** The body length of the message being read, once its headers were; -1 before. */
  private bodyLength = -1;
  private listening: Disposable | undefined;

  constructor(private readonly input: Readable) {
    super();
  }

  listen(callback: DataCallback): Disposable {
    this.callback = callback;
    const onData = (data: Buffer | string) => this.onData(typeof data === 'string' ? Buffer.from(data, 'utf8') : data);
    this.input.on('data', onData);
    this.input.on('error', (err: Error) => this.fireError(err));
    this.input.on('close', () => this.fireClose());
    this.listening = { dispose: () => void this.input.off('data', onData) };
    return this.listening;
  }

  /** A disposed connection reads nothing more: vscode-jsonrpc disposes the reader, not its listener. */
  override dispose(): void {
    this.listening?.dispose();
    this.callback = undefined;
    this.chunks = [];
    super.dispose();
  }

  private onData(data: Buffer): void {
    this.chunks.push(data);
    this.buffered += data.length;
    try {
      for (;;) {
        if (this.bodyLength < 0) {
          const length = this.readHeaders();
          if (length === undefined) return;
          this.bodyLength = length;
        }
        if (this.buffered < this.bodyLength) return;
        const body = this.take(this.bodyLength);
        this.bodyLength = -1;
        this.deliver(body);
      }
    } catch (err) {
      this.fireError(err);
    }
  }

  /** One message to the connection; a body that is not JSON is reported and skipped. */
  private deliver(body: Buffer): void {
    try {
      this.callback?.(JSON.parse(body.toString('utf8')) as Message);
    } catch (err) {
      this.fireError(err);
    }
  }

  /** The Content-Length of the next message once its headers are all here (and consumed). */
  private readHeaders(): number | undefined {
    if (this.buffered === 0) return undefined;
    const head = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks, this.buffered);
    const end = head.indexOf(HEADER_END);
    if (end < 0) {
      // Keep one chunk, so a header arriving a byte at a time is not joined again and again.
      this.chunks = [head];
      return undefined;
    }
    this.chunks = end + 4 === head.length ? [] : [head.subarray(end + 4)];
    this.buffered = head.length - end - 4;
    let length: string | undefined;
    for (const line of head.toString('ascii', 0, end).split('\r\n')) {
      const colon = line.indexOf(':');
      if (colon < 0) throw new Error(`Message header must separate key and value using ':'\n${line}`);
      if (line.slice(0, colon).toLowerCase() === 'content-length') length = line.slice(colon + 1).trim();
    }
    if (!length) throw new Error('Header must provide a Content-Length property.');
    const n = Number.parseInt(length, 10);
    if (Number.isNaN(n)) throw new Error(`Content-Length value must be a number. Got ${length}`);
    return n;
  }

  /** The next `n` buffered bytes, consumed; `n` are there. */
  private take(n: number): Buffer {
    const first = this.chunks[0];
    if (first && first.length >= n) {
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      this.buffered -= n;
      return first.subarray(0, n);
    }
    const all = Buffer.concat(this.chunks, this.buffered);
    this.chunks = all.length === n ? [] : [all.subarray(n)];
    this.buffered -= n;
    return all.subarray(0, n);
  }
}
