/**
 * One call's cancellation, with its `AbortSignal` made only when a tool asks for it. Most
 * calls never do (a `read`), and an AbortController with its signal and a listener costs
 * ~3.5 µs of the runner's CPU per call, more than a trivial call's system calls; the registry
 * watches every call through `onAbort` instead.
 */
export class CallCancellation {
  private controller: AbortController | undefined;
  private listeners: (() => void)[] | undefined;
  aborted = false;
  reason: unknown;

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.controller?.abort(reason);
    const listeners = this.listeners;
    this.listeners = undefined;
    for (const fn of listeners ?? []) fn();
  }

  /** Calls `fn` once when the call is cancelled (at once if it already was). */
  onAbort(fn: () => void): void {
    if (this.aborted) fn();
    else (this.listeners ??= []).push(fn);
  }
}
