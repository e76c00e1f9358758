import { EventEmitter } from 'node:events';
import { ConnectError, type HandlerContext } from '@connectrpc/connect';
import type { DuplexStream } from '../grpc/streams';

/** Messages queued past this make `write` report backpressure (`false`, then 'drain'). */
const HIGH_WATER = 16;

/**
 * Messages waiting for the transport to take them: pushed by the logic, pulled by Connect's
 * response writer as an async iterable. Ends once drained after `end`, or throws after `fail`
 * (what was queued before still goes out first).
 */
export class Outbox<T> implements AsyncIterable<T> {
  private items: T[] = [];
  private head = 0;
  private done = false;
  private error?: { err: unknown };
  private wake?: () => void;
  private readonly drained: (() => void)[] = [];

  get size(): number {
    return this.items.length - this.head;
  }

  get closed(): boolean {
    return this.done;
  }

  /** Queues `item`; false once HIGH_WATER are waiting (the logic may wait for `whenDrained`). */
  push(item: T): boolean {
    if (this.done) return false;
    this.items.push(item);
    this.poke();
    return this.size < HIGH_WATER;
  }

  /** Resolves once fewer than HIGH_WATER wait, or the outbox is closed. */
  whenDrained(): Promise<void> {
    if (this.size < HIGH_WATER || this.done) return Promise.resolve();
    return new Promise((resolve) => this.drained.push(resolve));
  }

  end(): void {
    if (this.done) return;
    this.done = true;
    this.poke();
    this.flushDrained();
  }

  fail(err: unknown): void {
    if (this.done) return;
    this.error = { err };
    this.end();
  }

  /** Called when the queue fell below HIGH_WATER. */
  onDrain?: () => void;

  private poke(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  private flushDrained(): void {
    for (const d of this.drained.splice(0)) d();
    this.onDrain?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      if (this.size > 0) {
        const item = this.items[this.head++] as T;
        if (this.head > 64 && this.head * 2 > this.items.length) {
          this.items = this.items.slice(this.head);
          this.head = 0;
        }
        if (this.size === HIGH_WATER - 1) this.flushDrained();
        yield item;
        continue;
      }
      if (this.done) {
        if (this.error) throw this.error.err;
        return;
      }
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }
}

/**
 * A Connect client stream or bidirectional stream in the shape its logic drives (grpc-js's
 * server streams, `DuplexStream`): the request messages come as 'data' events and the
 * half-close as 'end'; the client going away (or the call ending, or its deadline) as
 * 'cancelled'; `write` and `end` feed the response; `fail` ends it with an error, as emitting
 * 'error' does on grpc-js.
 */
export class ConnectStream<In, Out> extends EventEmitter implements DuplexStream<In, Out> {
  readonly metadata: { get(key: string): string[] };
  readonly outbox = new Outbox<Out>();
  cancelled = false;
  destroyed = false;
  private readonly deadline: number;
  private paused = false;
  private resumed?: () => void;

  constructor(
    private readonly input: AsyncIterable<In>,
    private readonly ctx: HandlerContext,
  ) {
    super();
    this.metadata = {
      get: (key) => {
        const v = ctx.requestHeader.get(key);
        return v === null ? [] : [v];
      },
    };
    const left = ctx.timeoutMs();
    this.deadline = left === undefined ? Number.POSITIVE_INFINITY : Date.now() + left;
    this.outbox.onDrain = () => this.emit('drain');
    if (ctx.signal.aborted) queueMicrotask(() => this.gone());
    else ctx.signal.addEventListener('abort', () => this.gone(), { once: true });
  }

  get writableEnded(): boolean {
    return this.outbox.closed;
  }

  getDeadline(): number {
    return this.deadline;
  }

  write(msg: Out): boolean {
    if (this.cancelled) return false;
    return this.outbox.push(msg);
  }

  end(): void {
    this.outbox.end();
  }

  /** Ends the response with this error (a GatewayError or a ConnectError), once; listeners of 'error' hear it. */
  fail(err: unknown): void {
    if (this.destroyed || this.outbox.closed) return;
    this.destroyed = true;
    this.outbox.fail(err);
    if (this.listenerCount('error') > 0) this.emit('error', err as Error);
  }

  pause(): this {
    this.paused = true;
    return this;
  }

  resume(): this {
    this.paused = false;
    const r = this.resumed;
    this.resumed = undefined;
    r?.();
    return this;
  }

  /** Reads the request messages into events; call once the logic has its listeners on. */
  start(): void {
    void (async () => {
      try {
        for await (const msg of this.input) {
          if (this.cancelled || this.destroyed) return;
          this.emit('data', msg);
          if (this.paused) await new Promise<void>((r) => (this.resumed = r));
        }
        if (!this.cancelled && !this.destroyed) this.emit('end');
      } catch (err) {
        // A client gone is 'cancelled'; anything else (an oversized or malformed message) fails the stream.
        if (!this.cancelled && !this.ctx.signal.aborted) this.fail(err);
      }
    })();
  }

  private gone(): void {
    if (this.cancelled) return;
    this.cancelled = true;
    this.resume();
    // Past its deadline the stream ends DEADLINE_EXCEEDED (Connect's reason); otherwise nobody is listening.
    const reason: unknown = this.ctx.signal.reason;
    if (reason instanceof ConnectError) this.outbox.fail(reason);
    else this.outbox.end();
    this.emit('cancelled');
  }
}
