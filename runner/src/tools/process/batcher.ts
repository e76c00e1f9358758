import type { ProcessStream } from '../../../../protocol/src/process';

/** Longest a chunk of output waits for more before it is sent. */
export const BATCH_DELAY_MS = 5;
/** Most bytes held before they are sent at once. */
export const BATCH_MAX_BYTES = 64 * 1024;

interface Segment {
  stream: ProcessStream;
  chunks: Buffer[];
}

/**
 * Coalesces a process's output into few sends: chunks wait at most BATCH_DELAY_MS, or until
 * BATCH_MAX_BYTES are held, whichever comes first. Runs of one stream become one send; the
 * order of the streams' output, as it arrived, is kept.
 */
export class OutputBatcher {
  private segments: Segment[] = [];
  private bytes = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly send: (stream: ProcessStream, data: Buffer) => void,
    private readonly delayMs = BATCH_DELAY_MS,
    private readonly maxBytes = BATCH_MAX_BYTES,
  ) {}

  push(stream: ProcessStream, chunk: Buffer): void {
    if (chunk.length === 0) return;
    const last = this.segments[this.segments.length - 1];
    if (last?.stream === stream) last.chunks.push(chunk);
    else this.segments.push({ stream, chunks: [chunk] });
    this.bytes += chunk.length;
    if (this.bytes >= this.maxBytes) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), this.delayMs);
  }

  /** Sends everything held now. */
  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const segments = this.segments;
    this.segments = [];
    this.bytes = 0;
    for (const s of segments) this.send(s.stream, s.chunks.length === 1 ? s.chunks[0] : Buffer.concat(s.chunks));
  }
}
