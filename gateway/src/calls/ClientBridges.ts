import { randomUUID } from 'node:crypto';
import type { ToolResult } from '../../../protocol/src/tools';
import { errorResult } from './results';

/** The tools one call has handed to the client, each waiting for the client's result. */
export class ClientBridges {
  private readonly waiting = new Map<string, (r: ToolResult) => void>();

  /** Sends a bridged call under a fresh id (through `send`) and waits for its result. */
  call(send: (bridgeId: string) => void): Promise<ToolResult> {
    const bridgeId = `b-${randomUUID()}`;
    return new Promise((resolve) => {
      this.waiting.set(bridgeId, (r) => {
        this.waiting.delete(bridgeId);
        resolve(r);
      });
      send(bridgeId);
    });
  }

  /** The client's result; one for a bridged call no longer waiting is dropped. */
  settle(bridgeId: string, result: ToolResult): void {
    this.waiting.get(bridgeId)?.(result);
  }

  /** The client can no longer answer: every waiting call ends with an is_error result saying why. */
  abandonAll(message: string): void {
    for (const r of this.waiting.values()) r(errorResult(message));
  }
}
