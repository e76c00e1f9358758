import { Metadata, status } from '@grpc/grpc-js';
import { BinaryWriter } from '@bufbuild/protobuf/wire';
import { GatewayError } from '../errors';

/**
 * RESOURCE_EXHAUSTED with machine-readable details, in the two forms clients commonly read:
 * `grpc-status-details-bin` (a google.rpc.Status carrying google.rpc.RetryInfo and/or
 * google.rpc.QuotaFailure, as gRPC's richer error model defines), and for clients without
 * those protos, the plain trailer `retry-after-ms`.
 */
export class ResourceExhausted extends GatewayError {
  constructor(
    message: string,
    readonly detail: { retryAfterMs?: number; quota?: { subject: string; description: string } },
  ) {
    super(status.RESOURCE_EXHAUSTED, message);
    const md = new Metadata();
    if (detail.retryAfterMs !== undefined) md.set('retry-after-ms', String(detail.retryAfterMs));
    md.set('grpc-status-details-bin', encodeStatus(status.RESOURCE_EXHAUSTED, message, detail));
    this.metadata = md;
  }
}

const any = (w: BinaryWriter, field: number, typeUrl: string, value: Uint8Array) =>
  w.tag(field, 2).fork().tag(1, 2).string(typeUrl).tag(2, 2).bytes(value).join();

/**
 * The error details of a refusal, each a google.rpc message's name and its bytes: RetryInfo
 * (`{ Duration retry_delay = 1 }`) and QuotaFailure (`{ repeated Violation violations = 1 }`).
 * gRPC carries them in a google.rpc.Status, Connect in its error's `details`.
 */
export function refusalDetails(detail: ResourceExhausted['detail']): { type: string; value: Uint8Array }[] {
  const out: { type: string; value: Uint8Array }[] = [];
  if (detail.retryAfterMs !== undefined) {
    const ms = detail.retryAfterMs;
    // Duration { int64 seconds = 1; int32 nanos = 2 }
    const info = new BinaryWriter()
      .tag(1, 2)
      .fork()
      .tag(1, 0)
      .int64(Math.floor(ms / 1000))
      .tag(2, 0)
      .int32((ms % 1000) * 1_000_000)
      .join()
      .finish();
    out.push({ type: 'google.rpc.RetryInfo', value: info });
  }
  if (detail.quota) {
    // Violation { subject = 1; description = 2 }
    const failure = new BinaryWriter()
      .tag(1, 2)
      .fork()
      .tag(1, 2)
      .string(detail.quota.subject)
      .tag(2, 2)
      .string(detail.quota.description)
      .join()
      .finish();
    out.push({ type: 'google.rpc.QuotaFailure', value: failure });
  }
  return out;
}

function encodeStatus(code: number, message: string, detail: ResourceExhausted['detail']): Buffer {
  const w = new BinaryWriter();
  w.tag(1, 0).int32(code).tag(2, 2).string(message);
  for (const d of refusalDetails(detail)) any(w, 3, `type.googleapis.com/${d.type}`, d.value);
  return Buffer.from(w.finish());
}
