/** Keeps the last `limit` bytes of a stream: a worker's conclusion is at the end of its output. */
export class CappedTail {
  private chunks: Buffer[] = [];
  private size = 0;
  private dropped = 0;

  constructor(private readonly limit: number) {}

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
    while (this.size > this.limit) {
      const first = this.chunks[0];
      const excess = this.size - this.limit;
      if (first.length <= excess) {
        this.chunks.shift();
        this.size -= first.length;
        this.dropped += first.length;
      } else {
        this.chunks[0] = first.subarray(excess);
        this.size -= excess;
        this.dropped += excess;
      }
    }
  }

  /** The last non-blank line so far, for progress. */
  lastLine(): string {
    const tail = (this.chunks[this.chunks.length - 1] ?? Buffer.alloc(0)).toString('utf8');
    const lines = tail.split('\n').map((l) => l.trim()).filter(Boolean);
    return (lines[lines.length - 1] ?? '').slice(0, 300);
  }

  text(): string {
    const s = Buffer.concat(this.chunks).toString('utf8');
    return this.dropped ? `[the first ${this.dropped} bytes of output were left out]\n${s}` : s;
  }
}
