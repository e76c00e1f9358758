import * as grpc from '@grpc/grpc-js';
import { BinaryReader, BinaryWriter } from '@bufbuild/protobuf/wire';
import { TetherError } from './errors';

// grpc.health.v1 is two tiny messages; they are coded here rather than generated, so the client
// does not carry the health proto.
const SERVING = 1;
const STATUS_NAMES = ['UNKNOWN', 'SERVING', 'NOT_SERVING', 'SERVICE_UNKNOWN'];

const definition: grpc.ServiceDefinition = {
  check: {
    path: '/grpc.health.v1.Health/Check',
    requestStream: false,
    responseStream: false,
    requestSerialize: (service: string) => Buffer.from(new BinaryWriter().tag(1, 2).string(service).finish()),
    requestDeserialize: () => '',
    responseSerialize: () => Buffer.alloc(0),
    responseDeserialize: (b: Buffer) => {
      const r = new BinaryReader(b);
      let status = 0;
      while (r.pos < r.len) {
        const [field, wire] = r.tag();
        if (field === 1 && wire === 0) status = r.int32();
        else r.skip(wire);
      }
      return status;
    },
  },
};
const HealthClient = grpc.makeGenericClientConstructor(definition, 'Health');

/** The gateway's health status for `service` ("SERVING", "NOT_SERVING", …); needs no token. */
export async function checkHealth(address: string, service = 'tether.v1.Gateway', deadlineMs = 2000): Promise<string> {
  const client = new HealthClient(address, grpc.credentials.createInsecure());
  try {
    return await healthOn(client, service, deadlineMs);
  } finally {
    client.close();
  }
}

/**
 * A health checker on an open channel (a TetherClient's own), so a check travels the same
 * connection as the calls it is compared with.
 */
export function healthChecker(
  channel: grpc.ChannelInterface,
): (service?: string, deadlineMs?: number) => Promise<string> {
  const client = new HealthClient('unused', grpc.credentials.createInsecure(), { channelOverride: channel });
  return (service = 'tether.v1.Gateway', deadlineMs = 2000) => healthOn(client, service, deadlineMs);
}

function healthOn(client: grpc.Client, service: string, deadlineMs: number): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    (client as unknown as { check: HealthCheck }).check(
      service,
      { deadline: Date.now() + deadlineMs },
      (err, status) => {
        if (err) reject(TetherError.from(err));
        else resolve(STATUS_NAMES[status] ?? String(status));
      },
    );
  });
}

type HealthCheck = (
  service: string,
  options: grpc.CallOptions,
  cb: (err: grpc.ServiceError | null, status: number) => void,
) => void;

/** Resolves once the gateway reports SERVING; rejects with the last error after `timeoutMs`. */
export async function waitUntilServing(address: string, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < end) {
    try {
      const s = await checkHealth(address);
      if (s === STATUS_NAMES[SERVING]) return;
      last = new Error(`health is ${s}`);
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new TetherError(
    grpc.status.DEADLINE_EXCEEDED,
    `the gateway at ${address} did not report SERVING within ${timeoutMs} ms: ${(last as Error)?.message ?? 'no answer'}`,
  );
}
