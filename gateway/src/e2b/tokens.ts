import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * The access token of each sandbox's in-sandbox API (E2B's `envdAccessToken`): an HMAC of the
 * run id under the gateway's key, so any replica sharing the key checks it without storing it.
 * It names one run and nothing else; the tenant is the run's own.
 */
export class SandboxTokens {
  private readonly key: Buffer;

  constructor(key?: string) {
    this.key = key ? Buffer.from(key, 'utf8') : randomBytes(32);
  }

  issue(runId: string): string {
    return createHmac('sha256', this.key).update(`e2b-sandbox:${runId}`).digest('base64url');
  }

  verify(runId: string, token: string | undefined): boolean {
    if (!token) return false;
    const want = Buffer.from(this.issue(runId));
    const got = Buffer.from(token);
    return want.length === got.length && timingSafeEqual(want, got);
  }
}
