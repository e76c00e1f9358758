import { logger } from '../log';

export interface DiskShape {
  sizeMb: number;
  owner: { uid: number; gid: number };
}

interface Maker<D> {
  make(shape: DiskShape): Promise<D>;
  release(disk: D): Promise<void>;
}

/**
 * Workspace disks made ahead of need: formatting and attaching one is most of what a cold
 * start spends on its disk, so a few of each shape runs asked for lately are kept ready. They
 * are made one at a time, a moment after the start that asked, so a refill does not compete
 * with the start it follows for the machine's cores.
 */
export class SpareDisks<D extends { image: string }> {
  private readonly ready = new Map<string, D[]>();
  /** Shapes to keep spares of, least recently asked for first. */
  private readonly shapes = new Map<string, DiskShape>();
  private filling?: Promise<void>;
  private timer?: NodeJS.Timeout;
  private closed = false;

  constructor(
    private readonly perShape: number,
    private readonly maker: Maker<D>,
    private readonly maxShapes = 4,
    private readonly delayMs = 500,
  ) {}

  take(shape: DiskShape): D | undefined {
    return this.ready.get(keyOf(shape))?.shift();
  }

  count(shape: DiskShape): number {
    return this.ready.get(keyOf(shape))?.length ?? 0;
  }

  /** Tops up the spares of `shape` soon; the shapes not asked for longest are let go past `maxShapes`. */
  refill(shape: DiskShape): void {
    if (this.perShape === 0 || this.closed) return;
    const key = keyOf(shape);
    this.shapes.delete(key);
    this.shapes.set(key, shape);
    for (const old of [...this.shapes.keys()].slice(0, Math.max(0, this.shapes.size - this.maxShapes))) {
      this.shapes.delete(old);
      for (const d of this.ready.get(old)?.splice(0) ?? []) void this.maker.release(d).catch(() => undefined);
    }
    if (this.timer || this.filling) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.filling = this.fill().finally(() => {
        this.filling = undefined;
      });
    }, this.delayMs);
    this.timer.unref();
  }

  /** Stops making spares and releases the ones left. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.filling;
    for (const list of this.ready.values())
      for (const d of list.splice(0)) await this.maker.release(d).catch(() => undefined);
  }

  private async fill(): Promise<void> {
    // Most recently asked for first.
    for (const [key, shape] of [...this.shapes].reverse()) {
      const list = this.ready.get(key) ?? [];
      this.ready.set(key, list);
      while (!this.closed && this.shapes.has(key) && list.length < this.perShape) {
        let disk: D;
        try {
          disk = await this.maker.make(shape);
        } catch (err) {
          // Tried again on the next start that asks; runs make their own disks meanwhile.
          logger.warn({ err: (err as Error).message }, 'a spare workspace disk could not be made');
          return;
        }
        if (this.closed || !this.shapes.has(key)) {
          await this.maker.release(disk).catch(() => undefined);
          return;
        }
        list.push(disk);
      }
    }
  }
}

function keyOf({ sizeMb, owner }: DiskShape): string {
  return `${sizeMb}:${owner.uid}:${owner.gid}`;
}
