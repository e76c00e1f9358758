import { CappedTail } from '../../util/cappedTail';

/** One captured chunk of the debuggee's output. */
export interface OutputChunk {
  category: 'stdout' | 'stderr';
  text: string;
}

/**
 * The debuggee's stdout/stderr, capped: when the total passes the cap the oldest chunks are
 * dropped (a chunk bigger than the whole cap keeps only its tail), and the count of dropped
 * characters is kept so the reader knows the start is missing.
 */
export class OutputBuffer {
  private readonly held: CappedTail<OutputChunk>;

  constructor(readonly capBytes: number) {
    this.held = new CappedTail<OutputChunk>(
      capBytes,
      (c) => c.text.length,
      (c, n) => ({ category: c.category, text: c.text.slice(n) }),
    );
  }

  push(category: OutputChunk['category'], text: string): void {
    if (text.length === 0) return;
    // A pty-backed debuggee writes CRLF; the model reads plain lines.
    this.held.push({ category, text: text.replace(/\r\n/g, '\n') });
  }

  /** Everything still held, oldest first (consecutive chunks of one stream joined), and how many characters were dropped before it. */
  read(): { chunks: OutputChunk[]; droppedChars: number; totalChars: number } {
    const chunks: OutputChunk[] = [];
    for (const c of this.held.items) {
      const last = chunks[chunks.length - 1];
      if (last && last.category === c.category) last.text += c.text;
      else chunks.push({ ...c });
    }
    return { chunks, droppedChars: this.held.dropped, totalChars: this.held.size + this.held.dropped };
  }

  /** One stream's retained text: the two streams arrive on separate pipes, so only each alone has a reliable order. */
  stream(category: OutputChunk['category']): string {
    return this.held.items
      .filter((c) => c.category === category)
      .map((c) => c.text)
      .join('');
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
    this.held.clear();
  }
}
