/** Raised synchronously by FairQueue.submit when the tenant's waiting line is full. */
export class QueueFullError extends Error {
  constructor(
    readonly tenant: string,
    readonly waiting: number,
    readonly limit: number,
  ) {
    super(
      `tenant ${tenant} already has ${waiting} CreateRuns waiting for admission, the limit (queuedCreates) is ${limit}`,
    );
    this.name = 'QueueFullError';
  }
}

interface Job {
  task: () => Promise<unknown>;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
}

/**
 * Runs at most `concurrency` tasks at once; waiting tasks are taken round robin across
 * tenants (first come first served within one), so a tenant with many waiting tasks delays
 * another tenant's by at most one turn each.
 */
export class FairQueue {
  private readonly waiting = new Map<string, Job[]>();
  /** Tenants with waiting jobs, in turn order. */
  private readonly turn: string[] = [];
  private running = 0;

  constructor(private readonly concurrency: number) {}

  waitingFor(tenant: string): number {
    return this.waiting.get(tenant)?.length ?? 0;
  }

  get active(): number {
    return this.running;
  }

  /**
   * Queues a task; throws QueueFullError at once (before anything happens) when the tenant
   * already has `maxWaiting` tasks waiting and no slot is free.
   */
  submit<T>(tenant: string, maxWaiting: number, task: () => Promise<T>): Promise<T> {
    const line = this.waiting.get(tenant) ?? [];
    const startsNow = this.running < this.concurrency && this.turn.length === 0;
    if (!startsNow && line.length >= maxWaiting) throw new QueueFullError(tenant, line.length, maxWaiting);
    return new Promise<T>((resolve, reject) => {
      const job: Job = { task, resolve: resolve as (v: unknown) => void, reject };
      if (startsNow) return this.start(job);
      if (line.length === 0) {
        this.waiting.set(tenant, line);
        this.turn.push(tenant);
      }
      line.push(job);
    });
  }

  private start(job: Job): void {
    this.running++;
    let p: Promise<unknown>;
    try {
      p = job.task();
    } catch (err) {
      p = Promise.reject(err);
    }
    p.then(job.resolve, job.reject).finally(() => {
      this.running--;
      this.next();
    });
  }

  private next(): void {
    while (this.running < this.concurrency && this.turn.length > 0) {
      const tenant = this.turn.shift()!;
      const line = this.waiting.get(tenant)!;
      const job = line.shift()!;
      if (line.length > 0) this.turn.push(tenant);
      else this.waiting.delete(tenant);
      this.start(job);
    }
  }
}
