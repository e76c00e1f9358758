/**
 * Events pushed by callbacks and read by one async iterator, as a server stream's handler reads
 * them: the reader waits when it is empty; `close` ends it after what is queued.
 */
export class EventQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private wake?: () => void;
  private closed = false;

  push(item: T): void {
    if (this.closed) return;
    this.items.push(item);
    this.wake?.();
  }

  close(): void {
    this.closed = true;
    this.wake?.();
  }

  get length(): number {
    return this.items.length;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      const item = this.items.shift();
      if (item !== undefined) {
        yield item;
        continue;
      }
      if (this.closed) return;
      await new Promise<void>((res) => {
        this.wake = res;
      });
      this.wake = undefined;
    }
  }
}
