import { toBinary } from '@bufbuild/protobuf';
import { CallsOutputSchema, CallToolOutputSchema, type CallsOutput, type CallToolOutput } from '@tether/contract';

function reflected(msg: CallToolOutput): Buffer {
  const b = toBinary(CallToolOutputSchema, msg);
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength);
}

const varintLength = (n: number) => (n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : n < 0x10000000 ? 4 : 5);

function writeVarint(buf: Buffer, at: number, n: number): number {
  let o = at;
  let v = n;
  while (v >= 0x80) {
    buf[o++] = (v & 0x7f) | 0x80;
    v >>>= 7;
  }
  buf[o++] = v;
  return o;
}

// Wire tags (field number << 3 | wire type 2, length-delimited; 0 for the bool).
const CALLS_ID = 0x0a; // CallsOutput.call_id = 1
const CALLS_OUTPUT = 0x12; // CallsOutput.output = 2
const OUTPUT_RESULT = 0x22; // CallToolOutput.result = 4
const RESULT_CONTENT = 0x0a; // ToolResult.content = 1
const RESULT_IS_ERROR = 0x10; // ToolResult.is_error = 2
const RESULT_STRUCTURED = 0x1a; // ToolResult.structured_json = 3
const CONTENT_TEXT = 0x0a; // Content.text = 1
const CONTENT_JSON = 0x22; // Content.json = 4

/**
 * Encodes a CallToolOutput as protobuf-es's `toBinary` does, byte for byte, writing the common
 * case directly: a result whose content is text and JSON items. protobuf-es encodes by
 * reflection, walking the schema for every message; this is the one message every call sends.
 * Anything else (progress, questions, bridged calls, images, tables, unknown fields) goes
 * through `toBinary`.
 */
export function encodeCallToolOutput(msg: CallToolOutput): Buffer {
  if (msg.msg.case !== 'result' || msg.$unknown || msg.msg.value.$unknown) return reflected(msg);
  const r = msg.msg.value;
  const items: { tag: number; text: string; bytes: number; length: number }[] = [];
  let size = 0;
  for (const c of r.content) {
    const kind = c.item.case;
    if ((kind !== 'text' && kind !== 'json') || c.$unknown) return reflected(msg);
    const text = c.item.value;
    const bytes = Buffer.byteLength(text);
    // An empty string is the oneof's chosen field all the same: written with length 0.
    const length = 1 + varintLength(bytes) + bytes;
    items.push({ tag: kind === 'text' ? CONTENT_TEXT : CONTENT_JSON, text, bytes, length });
    size += 1 + varintLength(length) + length;
  }
  if (r.isError) size += 2;
  const structuredBytes = r.structuredJson ? Buffer.byteLength(r.structuredJson) : 0;
  if (structuredBytes > 0) size += 1 + varintLength(structuredBytes) + structuredBytes;
  const buf = Buffer.allocUnsafe(1 + varintLength(size) + size);
  let o = 0;
  buf[o++] = OUTPUT_RESULT;
  o = writeVarint(buf, o, size);
  for (const item of items) {
    buf[o++] = RESULT_CONTENT;
    o = writeVarint(buf, o, item.length);
    buf[o++] = item.tag;
    o = writeVarint(buf, o, item.bytes);
    o += buf.write(item.text, o, 'utf8');
  }
  if (r.isError) {
    buf[o++] = RESULT_IS_ERROR;
    buf[o++] = 1;
  }
  if (structuredBytes > 0) {
    buf[o++] = RESULT_STRUCTURED;
    o = writeVarint(buf, o, structuredBytes);
    o += buf.write(r.structuredJson, o, 'utf8');
  }
  return buf;
}

/**
 * Encodes a CallsOutput as `toBinary` does: the call's id, then its CallToolOutput through
 * `encodeCallToolOutput`. Errors and unknown fields go through `toBinary`.
 */
export function encodeCallsOutput(msg: CallsOutput): Buffer {
  if (msg.msg.case !== 'output' || msg.$unknown) {
    const b = toBinary(CallsOutputSchema, msg);
    return Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  }
  const inner = encodeCallToolOutput(msg.msg.value);
  const idBytes = Buffer.byteLength(msg.callId);
  const buf = Buffer.allocUnsafe(
    (idBytes > 0 ? 1 + varintLength(idBytes) + idBytes : 0) + 1 + varintLength(inner.length) + inner.length,
  );
  let o = 0;
  if (idBytes > 0) {
    buf[o++] = CALLS_ID;
    o = writeVarint(buf, o, idBytes);
    o += buf.write(msg.callId, o, 'utf8');
  }
  buf[o++] = CALLS_OUTPUT;
  o = writeVarint(buf, o, inner.length);
  inner.copy(buf, o);
  return buf;
}
