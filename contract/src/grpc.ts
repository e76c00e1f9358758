import type { ServiceDefinition } from '@grpc/grpc-js';
import { fromBinary, toBinary, type DescMessage, type DescService, type MessageShape } from '@bufbuild/protobuf';
import { Gateway } from './gen/tether/v1/gateway_pb';

/**
 * A grpc-js service definition built from a protobuf-es service descriptor, so the gateway and
 * its clients serialize exactly the generated types (no second code generator, no proto
 * loading at run time).
 */
export function grpcDefinition(service: DescService): ServiceDefinition {
  const def: Record<string, unknown> = {};
  for (const m of service.methods) {
    const input: DescMessage = m.input;
    const output: DescMessage = m.output;
    def[m.localName] = {
      path: `/${service.typeName}/${m.name}`,
      requestStream: m.methodKind === 'client_streaming' || m.methodKind === 'bidi_streaming',
      responseStream: m.methodKind === 'server_streaming' || m.methodKind === 'bidi_streaming',
      requestSerialize: (v: MessageShape<DescMessage>) => Buffer.from(toBinary(input, v)),
      requestDeserialize: (b: Buffer) => fromBinary(input, b),
      responseSerialize: (v: MessageShape<DescMessage>) => Buffer.from(toBinary(output, v)),
      responseDeserialize: (b: Buffer) => fromBinary(output, b),
      originalName: m.localName,
    };
  }
  return def as ServiceDefinition;
}

/** tether.v1.Gateway as grpc-js serves and calls it. */
export const gatewayDefinition: ServiceDefinition = grpcDefinition(Gateway);
