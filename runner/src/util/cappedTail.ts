/**
 * The last `limit` units of a stream of pieces (bytes of Buffers, characters of strings,
 * tagged chunks): once the total passes the limit the oldest pieces go, and one cut at the
 * front keeps exactly `limit`. What was dropped is counted, so a reader knows the start is
 * missing. The end is what matters: a conclusion, a crash's last words.
 */
export class CappedTail<T> {
  private pieces: T[] = [];
  private held = 0;
  private droppedUnits = 0;

  constructor(
    readonly limit: number,
    private readonly sizeOf: (piece: T) => number,
    private readonly cutFront: (piece: T, units: number) => T,
  ) {}

  push(piece: T): void {
    this.pieces.push(piece);
    this.held += this.sizeOf(piece);
    while (this.held > this.limit && this.pieces.length > 0) {
      const first = this.pieces[0];
      const size = this.sizeOf(first);
      const excess = this.held - this.limit;
      if (size <= excess) {
        this.pieces.shift();
        this.held -= size;
        this.droppedUnits += size;
      } else {
        this.pieces[0] = this.cutFront(first, excess);
        this.held -= excess;
        this.droppedUnits += excess;
      }
    }
  }

  /** What is held, oldest first. */
  get items(): readonly T[] {
    return this.pieces;
  }

  /** Units held now. */
  get size(): number {
    return this.held;
  }

  /** Units dropped from the front so far. */
  get dropped(): number {
    return this.droppedUnits;
  }

  clear(): void {
    this.pieces = [];
    this.held = 0;
    this.droppedUnits = 0;
  }
}

/** The last `limit` bytes of a byte stream. */
export class ByteTail extends CappedTail<Buffer> {
  constructor(limit: number) {
    super(
      limit,
      (b) => b.length,
      (b, n) => b.subarray(n),
    );
  }

  toBuffer(): Buffer {
    return Buffer.concat(this.items);
  }
}

/** The last `limit` characters of a text stream. */
export class TextTail extends CappedTail<string> {
  constructor(limit: number) {
    super(
      limit,
      (s) => s.length,
      (s, n) => s.slice(n),
    );
  }

  text(): string {
    return this.items.join('');
  }
}
