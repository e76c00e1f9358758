import { create } from '@bufbuild/protobuf';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import {
  EgressRecordSchema,
  GetEgressLogResponseSchema,
  type EgressRecord as EgressRecordProto,
  type GetEgressLogResponse,
} from '@tether/contract';
import type { EgressRecord } from './log';
import type { EgressPage } from './page';

function recordToProto(r: EgressRecord): EgressRecordProto {
  const time = new Date(r.time);
  return create(EgressRecordSchema, {
    time: timestampFromDate(Number.isNaN(time.getTime()) ? new Date(0) : time),
    runId: r.runId,
    method: r.method,
    host: r.host,
    port: r.port,
    allowed: r.allowed,
    reason: r.reason ?? '',
    address: r.address ?? '',
    bytesOut: BigInt(Math.max(0, Math.trunc(r.bytesOut))),
    bytesIn: BigInt(Math.max(0, Math.trunc(r.bytesIn))),
    durationMs: Math.max(0, Math.trunc(r.durationMs)),
  });
}

export function egressPageToProto(page: EgressPage): GetEgressLogResponse {
  return create(GetEgressLogResponseSchema, { records: page.records.map(recordToProto), nextPageToken: page.next });
}
