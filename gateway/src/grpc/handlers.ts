import type { UntypedServiceImplementation } from '@grpc/grpc-js';
import type { TokenAuthenticator } from '../auth';
import type { Telemetry } from '../observability/Telemetry';
import { Edge } from './edge';
import { type GatewayMethods, wrapMethods } from './streams';

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
  return wrapMethods<unknown>(methods, edge) as UntypedServiceImplementation;
}
