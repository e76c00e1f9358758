// The messages, enums and service descriptor generated from proto/tether/v1 (src/gen, by
// `buf generate proto` at the repository root). The grpc-js definition is `@tether/contract/grpc`,
// apart, so that re-exporting this module (as @tether/client does) adds only the protocol's types.
export * from './gen/tether/v1/gateway_pb';
