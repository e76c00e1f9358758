import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2';
import { status } from '@grpc/grpc-js';
import { GatewayError } from '../errors';
import { toStatus } from '../grpc/edge';

export type Req = IncomingMessage | Http2ServerRequest;
export type Res = ServerResponse | Http2ServerResponse;

/** The HTTP status E2B's REST API answers a gRPC status with. */
const HTTP_OF: Partial<Record<status, number>> = {
  [status.INVALID_ARGUMENT]: 400,
  [status.OUT_OF_RANGE]: 400,
  [status.UNAUTHENTICATED]: 401,
  [status.PERMISSION_DENIED]: 403,
  [status.NOT_FOUND]: 404,
  [status.ALREADY_EXISTS]: 409,
  [status.FAILED_PRECONDITION]: 409,
  [status.RESOURCE_EXHAUSTED]: 429,
  [status.UNAVAILABLE]: 503,
  [status.DEADLINE_EXCEEDED]: 504,
  [status.UNIMPLEMENTED]: 501,
};

export function httpStatusOf(err: unknown): { code: number; message: string } {
  const st = toStatus(err);
  return { code: HTTP_OF[st.code] ?? 500, message: st.message };
}

export function header(req: Req, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** A JSON answer; an empty body for 204. */
export function sendJson(res: Res, code: number, body?: unknown): void {
  if (res.headersSent) return;
  if (code === 204 || body === undefined) {
    res.writeHead(code);
    res.end();
    return;
  }
  const text = JSON.stringify(body);
  res.writeHead(code, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** E2B's error body, `{code, message}`, with the HTTP status of the failure. */
export function sendError(res: Res, err: unknown): void {
  const { code, message } = httpStatusOf(err);
  if (res.headersSent) {
    res.end();
    return;
  }
  sendJson(res, code, { code, message });
}

/** The whole body, refused past `max` bytes (the request is not read further). */
export async function readBody(req: Req, max: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > max) throw new GatewayError(status.RESOURCE_EXHAUSTED, `the request body is larger than ${max} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

export async function readJson(req: Req, max: number): Promise<Record<string, unknown>> {
  const body = await readBody(req, max);
  if (body.length === 0) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw new GatewayError(status.INVALID_ARGUMENT, `the body is not JSON: ${(err as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    throw new GatewayError(status.INVALID_ARGUMENT, 'the body must be a JSON object');
  return parsed as Record<string, unknown>;
}
