import type { DebugProtocol } from '@vscode/debugprotocol';

const HEADER_END = Buffer.from('\r\n\r\n');

/** Largest single DAP message accepted from an adapter; a bigger one means a broken stream. */
export const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

/** Encodes one DAP message with its Content-Length header. */
export function encodeMessage(message: DebugProtocol.ProtocolMessage): Buffer {
  const body = Buffer.from(JSON.stringify(message), 'utf8');
  return Buffer.concat([Buffer.from(`Content-Length: ${body.length}\r\n\r\n`, 'ascii'), body]);
}

/**
 * Splits an adapter's byte stream into DAP messages. Chunks may cut a header or a body
 * anywhere; the decoder keeps what it has until a whole message is there.
 */
export class MessageDecoder {
  private buffer: Buffer = Buffer.alloc(0);

  /** Feeds bytes; returns every message completed by them, in order. */
  push(chunk: Buffer): DebugProtocol.ProtocolMessage[] {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    const out: DebugProtocol.ProtocolMessage[] = [];
    for (;;) {
      const headerEnd = this.buffer.indexOf(HEADER_END);
      if (headerEnd < 0) {
        if (this.buffer.length > 8192) throw new Error('DAP stream: no header terminator within 8 KiB');
        return out;
      }
      const length = contentLength(this.buffer.subarray(0, headerEnd).toString('ascii'));
      const start = headerEnd + HEADER_END.length;
      if (this.buffer.length < start + length) return out;
      const body = this.buffer.subarray(start, start + length).toString('utf8');
      this.buffer = this.buffer.subarray(start + length);
      out.push(JSON.parse(body) as DebugProtocol.ProtocolMessage);
    }
  }
}

function contentLength(header: string): number {
  for (const line of header.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon < 0) continue;
    if (line.slice(0, colon).trim().toLowerCase() !== 'content-length') continue;
    const n = Number(line.slice(colon + 1).trim());
    if (!Number.isInteger(n) || n < 0 || n > MAX_MESSAGE_BYTES)
      throw new Error(`DAP stream: bad Content-Length "${line}"`);
    return n;
  }
  throw new Error(`DAP stream: header without Content-Length: ${JSON.stringify(header.slice(0, 200))}`);
}
