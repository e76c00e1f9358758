import type { UntypedServiceImplementation } from '@grpc/grpc-js';
import { Gateway } from '@tether/contract';
import type { TokenAuthenticator } from '../auth';
import type { Telemetry } from '../observability/Telemetry';
import { Edge } from './edge';
import type { Bidi, ClientStream, GatewayMethods, ServerStream, Unary } from './streams';

/**
 * tether.v1.Gateway as grpc-js serves it: every RPC's logic (`methods.ts`) behind the gRPC edge,
 * which authenticates the caller and answers with a status.
 */
export function gatewayHandlers(
  methods: GatewayMethods,
  auth: TokenAuthenticator,
  telemetry: Telemetry,
): UntypedServiceImplementation {
  const edge = new Edge(auth, telemetry);
  const impl: UntypedServiceImplementation = {};
  for (const m of Gateway.methods) {
    const logic = methods[m.localName as keyof GatewayMethods];
    switch (m.methodKind) {
      case 'unary':
        impl[m.localName] = edge.unary(logic as Unary<unknown, unknown>);
        break;
      case 'server_streaming':
        impl[m.localName] = edge.serverStream(logic as ServerStream<unknown, unknown>);
        break;
      case 'client_streaming':
        impl[m.localName] = edge.clientStream(logic as ClientStream<unknown, unknown>);
        break;
      case 'bidi_streaming':
        impl[m.localName] = edge.bidi(logic as Bidi<unknown, unknown>);
        break;
    }
  }
  return impl;
}
