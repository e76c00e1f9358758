import { Metadata, status } from '@grpc/grpc-js';

/** gRPC status codes, by name: `Status.NOT_FOUND`, … */
export { status as Status };

/** The canonical name of a status code ("NOT_FOUND"), or the number for an unknown code. */
export function statusName(code: number): string {
  return (status as unknown as Record<number, string>)[code] ?? String(code);
}

/**
 * A call the gateway refused or could not complete: the request itself is wrong or not allowed
 * (INVALID_ARGUMENT, NOT_FOUND, UNAUTHENTICATED, …) or the run is gone (UNAVAILABLE,
 * FAILED_PRECONDITION). A tool that ran and failed is not an error of this kind: it is a result
 * with `isError` set, which the model should read.
 */
export class TetherError extends Error {
  override readonly name = 'TetherError';
  /** The gRPC status code (`Status.NOT_FOUND`, …). */
  readonly code: status;
  /** The gateway's message, without the code. */
  readonly details: string;
  readonly metadata: Metadata;

  constructor(code: status, details: string, options: { cause?: unknown; metadata?: Metadata } = {}) {
    super(`${statusName(code)}: ${details}`, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.details = details;
    this.metadata = options.metadata ?? new Metadata();
  }

  /** The code's name, e.g. "NOT_FOUND". */
  get codeName(): string {
    return statusName(this.code);
  }

  /** Wraps what grpc-js rejects with (a ServiceError) or anything else thrown on the way. */
  static from(err: unknown): TetherError {
    if (err instanceof TetherError) return err;
    const e = err as { code?: unknown; details?: unknown; message?: unknown; metadata?: unknown } | undefined;
    if (e && typeof e.code === 'number' && typeof e.details === 'string') {
      return new TetherError(e.code, e.details, {
        cause: err,
        metadata: e.metadata instanceof Metadata ? e.metadata : undefined,
      });
    }
    return new TetherError(status.UNKNOWN, e && typeof e.message === 'string' ? e.message : String(err), {
      cause: err,
    });
  }
}

/** Whether `err` is a TetherError, optionally with the given code. */
export function isTetherError(err: unknown, code?: status): err is TetherError {
  return err instanceof TetherError && (code === undefined || err.code === code);
}
