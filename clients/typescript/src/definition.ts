import type { ServiceDefinition } from '@grpc/grpc-js';
import { fromBinary, toBinary, type DescMessage } from '@bufbuild/protobuf';
import type { GenService } from '@bufbuild/protobuf/codegenv2';

/**
 * A grpc-js service definition built from a protobuf-es service descriptor, so the client
 * serializes exactly the generated types (no second code generator, no proto loading at run time).
 */
export function grpcDefinition(service: GenService<any>): ServiceDefinition {
  const def: Record<string, unknown> = {};
  for (const m of service.methods) {
    const input = m.input as DescMessage;
    const output = m.output as DescMessage;
    def[m.localName] = {
      path: `/${service.typeName}/${m.name}`,
      requestStream: m.methodKind === 'client_streaming' || m.methodKind === 'bidi_streaming',
      responseStream: m.methodKind === 'server_streaming' || m.methodKind === 'bidi_streaming',
      requestSerialize: (v: any) => Buffer.from(toBinary(input, v)),
      requestDeserialize: (b: Buffer) => fromBinary(input, b),
      responseSerialize: (v: any) => Buffer.from(toBinary(output, v)),
      responseDeserialize: (b: Buffer) => fromBinary(output, b),
      originalName: m.localName,
    };
  }
  return def as ServiceDefinition;
}
