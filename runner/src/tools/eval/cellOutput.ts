import type { ContentItem } from '../../../../protocol/src/tools';

export interface OutputLimits {
  /** Characters of printed text kept from the start of a cell's output. */
  headChars: number;
  /** Characters kept from its end once the head is full. */
  tailChars: number;
  /** Rich items (tables, images) kept per cell. */
  maxItems: number;
  /** Base64 characters of images kept per cell. */
  imageChars: number;
}

/**
 * A cell's result as it comes in: printed text and rich items in the order they appeared.
 * Text past the head is counted and only its tail kept, so no amount of printing is held whole.
 */
export class CellOutput {
  private readonly items: ContentItem[] = [];
  private text = '';
  private headUsed = 0;
  private tail = '';
  private omitted = 0;
  private droppedItems = 0;
  private imageChars = 0;
  /** The items display() or the echoed last expression gave, as opposed to printed text. */
  private readonly displayedItems = new Set<ContentItem>();
  totalChars = 0;

  constructor(private readonly limits: OutputLimits) {}

  addText(text: string): void {
    this.totalChars += text.length;
    const room = this.limits.headChars - this.headUsed;
    if (room > 0) {
      const head = text.slice(0, room);
      this.text += head;
      this.headUsed += head.length;
      text = text.slice(room);
    }
    if (text) this.addToTail(text);
  }

  /** Text the kernel itself dropped before sending a tail: counted, never seen. */
  addOmitted(count: number): void {
    this.totalChars += count;
    // Whatever comes next belongs after the gap, never in the head.
    this.headUsed = this.limits.headChars;
    this.omitted += count;
  }

  private addToTail(text: string): void {
    const keep = this.limits.tailChars;
    const joined = this.tail + text;
    if (joined.length > keep) {
      this.omitted += joined.length - keep;
      this.tail = joined.slice(-keep);
    } else this.tail = joined;
  }

  addItem(item: ContentItem): void {
    if (this.items.length >= this.limits.maxItems) {
      this.droppedItems++;
      return;
    }
    if (item.type === 'image') {
      if (this.imageChars + item.data.length > this.limits.imageChars) {
        this.droppedItems++;
        return;
      }
      this.imageChars += item.data.length;
    }
    this.flushText();
    this.items.push(item);
    this.displayedItems.add(item);
  }

  /** Indexes into the finished items of those that were displayed, not printed. */
  get displayed(): number[] {
    return this.items.flatMap((item, i) => (this.displayedItems.has(item) ? [i] : []));
  }

  private flushText(): void {
    if (this.text) this.items.push({ type: 'text', text: this.text });
    this.text = '';
  }

  get omittedChars(): number {
    return this.omitted;
  }

  /** The content items, with notes for whatever the caps left out, and then `closing` text. */
  finish(closing?: string): ContentItem[] {
    if (this.omitted || this.tail) {
      const note = this.omitted ? `\n… ${this.omitted} characters of output omitted …\n` : '';
      this.text += note + this.tail;
      this.tail = '';
    }
    if (this.droppedItems)
      this.text += `${this.text && !this.text.endsWith('\n') ? '\n' : ''}… ${this.droppedItems} more rich outputs (tables, images) left out\n`;
    if (closing) this.text += `${this.text && !this.text.endsWith('\n') ? '\n' : ''}${closing}`;
    this.flushText();
    return this.items;
  }
}
