import type { Metadata } from '@grpc/grpc-js';
import { status } from '@grpc/grpc-js';

/** A failure answered with a gRPC status: transport, auth, unknown runs, absent tools. */
export class GatewayError extends Error {
  /** Trailers sent with the status (retry hints, rich error details). */
  metadata?: Metadata;

  constructor(
    readonly code: status,
    message: string,
  ) {
    super(message);
    this.name = 'GatewayError';
  }
}

export const notFound = (what: string) => new GatewayError(status.NOT_FOUND, what);
export const invalid = (what: string) => new GatewayError(status.INVALID_ARGUMENT, what);
export const unavailable = (what: string) => new GatewayError(status.UNAVAILABLE, what);
