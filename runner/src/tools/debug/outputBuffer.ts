/** One captured chunk of the debuggee's output. */
export interface OutputChunk {
  category: 'stdout' | 'stderr';
  text: string;
}

/**
 * The debuggee's stdout/stderr, capped: when the total passes the cap the oldest chunks are
 * dropped (a chunk bigger than the whole cap keeps only its tail), and the count of dropped
 * bytes is kept so the reader knows the start is missing.
 */
export class OutputBuffer {
  private chunks: OutputChunk[] = [];
  private size = 0;
  private dropped = 0;

  constructor(readonly capBytes: number) {}

  push(category: OutputChunk['category'], text: string): void {
    if (text.length === 0) return;
    // A pty-backed debuggee writes CRLF; the model reads plain lines.
    let t = text.replace(/\r\n/g, '\n');
    if (t.length > this.capBytes) {
      this.dropped += t.length - this.capBytes;
      t = t.slice(t.length - this.capBytes);
    }
    const last = this.chunks[this.chunks.length - 1];
    if (last && last.category === category) last.text += t;
    else this.chunks.push({ category, text: t });
    this.size += t.length;
    while (this.size > this.capBytes && this.chunks.length > 0) {
      const first = this.chunks[0];
      const excess = this.size - this.capBytes;
      if (first.text.length <= excess) {
        this.chunks.shift();
        this.size -= first.text.length;
        this.dropped += first.text.length;
      } else {
        first.text = first.text.slice(excess);
        this.size -= excess;
        this.dropped += excess;
      }
    }
  }

  /** Everything still held, oldest first, and how many characters were dropped before it. */
  read(): { chunks: OutputChunk[]; droppedChars: number; totalChars: number } {
    return { chunks: this.chunks.map((c) => ({ ...c })), droppedChars: this.dropped, totalChars: this.size + this.dropped };
  }

  /** One stream's retained text: the two streams arrive on separate pipes, so only each alone has a reliable order. */
  stream(category: OutputChunk['category']): string {
    return this.chunks.filter((c) => c.category === category).map((c) => c.text).join('');
  }

  /** The retained output for a reader: stdout, then stderr under its own heading when there is any. */
  render(): string {
    const out = this.stream('stdout');
    const err = this.stream('stderr');
    if (!err) return out;
    return `${out ? `${out}${out.endsWith('\n') ? '' : '\n'}` : ''}--- stderr ---\n${err}`;
  }

  /** The last `max` characters of the rendered output, for results that end with a glimpse of it. */
  tail(max: number): string {
    const all = this.render();
    return all.length > max ? all.slice(all.length - max) : all;
  }

  clear(): void {
    this.chunks = [];
    this.size = 0;
    this.dropped = 0;
  }
}
