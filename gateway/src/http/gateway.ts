import { createContextValues, type ConnectRouter } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { Gateway } from '@tether/contract';
import { type GatewayMethods, wrapMethods } from '../grpc/streams';
import { type ConnectEdge, PEER } from './connectEdge';
import { type HttpRequest, type HttpResponse, sendJsonError } from './listener';

/**
 * tether.v1.Gateway over the Connect protocol (JSON or binary protobuf, HTTP/1.1 or HTTP/2):
 * every RPC's logic (`grpc/methods.ts`) behind the Connect edge. Only Connect is served here;
 * gRPC has its own port.
 */
export function connectGateway(
  methods: GatewayMethods,
  edge: ConnectEdge,
  limits: { maxMessageBytes: number },
): (req: HttpRequest, res: HttpResponse) => void {
  const impl = wrapMethods<unknown>(methods, edge);
  return connectNodeAdapter({
    routes: (router: ConnectRouter) => router.service(Gateway, impl),
    connect: true,
    grpc: false,
    grpcWeb: false,
    // curl and plain HTTP clients send no Connect-Protocol-Version.
    requireConnectProtocolHeader: false,
    readMaxBytes: limits.maxMessageBytes,
    writeMaxBytes: limits.maxMessageBytes,
    // JSON answers carry every field, defaults too (`"isError": false`, `"exitCode": 0`).
    jsonOptions: { alwaysEmitImplicit: true },
    contextValues: (req) =>
      createContextValues().set(PEER, `${req.socket?.remoteAddress ?? 'unknown'}:${req.socket?.remotePort ?? 0}`),
    fallback: (req, res) =>
      sendJsonError(res as HttpResponse, 404, 'not_found', `no such method: ${(req.url ?? '').split('?')[0].slice(1)}`),
  }) as (req: HttpRequest, res: HttpResponse) => void;
}
