import type { Metadata } from '@grpc/grpc-js';
import { BinaryReader } from '@bufbuild/protobuf/wire';

/** Reads the google.rpc.Status in grpc-status-details-bin: the type URLs of its details. */
export function detailTypes(md: Metadata): {
  code: number;
  types: string[];
  retrySeconds?: number;
  retryNanos?: number;
} {
  const bin = md.get('grpc-status-details-bin')[0] as Buffer;
  const r = new BinaryReader(bin);
  const out: ReturnType<typeof detailTypes> = { code: -1, types: [] };
  while (r.pos < r.len) {
    const [field] = r.tag();
    if (field === 1) out.code = r.int32();
    else if (field === 2) r.string();
    else if (field === 3) {
      const any = new BinaryReader(r.bytes());
      let type = '';
      let value: Uint8Array = new Uint8Array();
      while (any.pos < any.len) {
        const [f] = any.tag();
        if (f === 1) type = any.string();
        else value = any.bytes();
      }
      out.types.push(type);
      if (type.endsWith('RetryInfo')) {
        const d = new BinaryReader(value);
        d.tag();
        const dur = new BinaryReader(d.bytes());
        while (dur.pos < dur.len) {
          const [g] = dur.tag();
          if (g === 1) out.retrySeconds = Number(dur.int64());
          else out.retryNanos = dur.int32();
        }
      }
    }
  }
  return out;
}
