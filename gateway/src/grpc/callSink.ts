import type { CallToolOutput } from '@tether/contract';
import type { GatewayError } from '../errors';

/**
 * Where one call's messages go: its own CallTool stream, or its id on a shared Calls stream.
 * The call sees no difference between the two.
 */
export interface CallSink {
  /** When the call must be over (ms since the epoch), if the transport carries a deadline. */
  readonly deadline?: number;
  /** Whether the client can no longer receive this call's messages. */
  readonly gone: boolean;
  write(out: CallToolOutput): void;
  /** The result went out: the call is over. */
  end(): void;
  /** The call failed with this status: the call is over. */
  fail(err: GatewayError): void;
  /**
   * Called with a reason when nothing more of the call can reach its client: the client went
   * away, or (on a shared stream) the call ended while work of it was still under way.
   */
  onGone(fn: (reason: string) => void): void;
}
