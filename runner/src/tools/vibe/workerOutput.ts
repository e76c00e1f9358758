import { ByteTail } from '../../util/cappedTail';

/** A command worker's output: only its last bytes are kept, since its conclusion is at the end. */
export class WorkerOutput extends ByteTail {
  /** The last non-blank line so far, for progress. */
  lastLine(): string {
    const tail = (this.items[this.items.length - 1] ?? Buffer.alloc(0)).toString('utf8');
    const lines = tail
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean);
    return (lines[lines.length - 1] ?? '').slice(0, 300);
  }

  /** The kept output, with a note when its start was left out. */
  text(): string {
    const s = this.toBuffer().toString('utf8');
    return this.dropped ? `[the first ${this.dropped} bytes of output were left out]\n${s}` : s;
  }
}
