import { logger } from '../log';

interface Entry {
  tenant: string;
  endAt: number;
  autoPause: boolean;
  timer: NodeJS.Timeout;
}

/**
 * E2B's sandbox timeout: a sandbox is killed (or paused, with autoPause) when it runs out.
 * Kept in this gateway's memory: after a restart the runs stay, and tether's own idle pause and
 * stop still bound them.
 */
export class SandboxTimeouts {
  private readonly entries = new Map<string, Entry>();

  constructor(private readonly on: { expire(tenant: string, runId: string, autoPause: boolean): Promise<void> }) {}

  /** Starts (or restarts) the sandbox's timeout; 0 seconds: none. */
  set(tenant: string, runId: string, seconds: number, autoPause: boolean): void {
    this.clear(runId);
    if (seconds <= 0) return;
    const endAt = Date.now() + seconds * 1000;
    const timer = setTimeout(() => {
      this.entries.delete(runId);
      this.on.expire(tenant, runId, autoPause).catch((err: unknown) => {
        logger.warn({ err, runId }, 'the sandbox timeout could not end the run');
      });
    }, seconds * 1000);
    timer.unref();
    this.entries.set(runId, { tenant, endAt, autoPause, timer });
  }

  /** Moves the end to at least `seconds` from now. */
  extend(tenant: string, runId: string, seconds: number): void {
    const e = this.entries.get(runId);
    const left = e ? (e.endAt - Date.now()) / 1000 : 0;
    if (left < seconds) this.set(tenant, runId, seconds, e?.autoPause ?? false);
  }

  endAt(runId: string): number | undefined {
    return this.entries.get(runId)?.endAt;
  }

  autoPause(runId: string): boolean {
    return this.entries.get(runId)?.autoPause ?? false;
  }

  clear(runId: string): void {
    const e = this.entries.get(runId);
    if (e) clearTimeout(e.timer);
    this.entries.delete(runId);
  }
}
