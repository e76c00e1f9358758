/**
 * Settles with `p`, unless `ms` pass first: then with what `onTimeout` returns (or throws).
 * The timer goes as soon as either happens, so a settled race keeps nothing alive.
 */
export function withTimeout<T, U = never>(p: Promise<T>, ms: number, onTimeout: () => U): Promise<T | U> {
  let timer: NodeJS.Timeout | undefined;
  return new Promise<T | U>((resolve, reject) => {
    timer = setTimeout(() => settle(onTimeout, resolve, reject), Math.max(0, ms));
    p.then(resolve, reject);
  }).finally(() => clearTimeout(timer));
}

/**
 * Settles with `p`, unless `signal` aborts first: then with what `onAbort` returns (or
 * throws). Combine a call's signal with a bound by `AbortSignal.any([signal, AbortSignal.timeout(ms)])`.
 */
export function untilAborted<T, U = never>(p: Promise<T>, signal: AbortSignal, onAbort: () => U): Promise<T | U> {
  let abort: (() => void) | undefined;
  return new Promise<T | U>((resolve, reject) => {
    abort = () => settle(onAbort, resolve, reject);
    p.then(resolve, reject);
    if (signal.aborted) abort();
    else signal.addEventListener('abort', abort, { once: true });
  }).finally(() => signal.removeEventListener('abort', abort!));
}

function settle<U>(make: () => U, resolve: (v: U) => void, reject: (e: unknown) => void): void {
  try {
    resolve(make());
  } catch (err) {
    reject(err);
  }
}
