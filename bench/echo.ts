/**
 * The baseline every call-path benchmark is measured against: a bare grpc-js server on
 * loopback echoing bytes, with nothing of tether in the path.
 */
import * as grpc from '@grpc/grpc-js';
import { timeIt } from './lib';

const bytes: grpc.MethodDefinition<Buffer, Buffer> = {
  path: '',
  requestStream: false,
  responseStream: false,
  requestSerialize: (b: Buffer) => b,
  requestDeserialize: (b: Buffer) => b,
  responseSerialize: (b: Buffer) => b,
  responseDeserialize: (b: Buffer) => b,
};

/** A bare grpc-js server on loopback echoing bytes, unary and bidi; returns one call of each shape. */
export async function echoServer() {
  const def: grpc.ServiceDefinition = {
    unary: { ...bytes, path: '/bench.Echo/Unary' },
    bidi: { ...bytes, path: '/bench.Echo/Bidi', requestStream: true, responseStream: true },
  };
  const server = new grpc.Server();
  server.addService(def, {
    unary: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => cb(null, call.request),
    bidi: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => {
      call.on('data', (b: Buffer) => call.write(b));
      call.on('end', () => call.end());
    },
  });
  const port = await new Promise<number>((res, rej) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? rej(e) : res(p))),
  );
  const Client = grpc.makeGenericClientConstructor(def, 'Echo');
  const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as grpc.Client &
    Record<string, any>;
  const payload = Buffer.from(JSON.stringify({ path: 'bench.txt' }));
  const unary = () => new Promise<void>((res, rej) => client.unary(payload, (e: Error | null) => (e ? rej(e) : res())));
  const streamPerCall = () =>
    new Promise<void>((res, rej) => {
      const call = client.bidi() as grpc.ClientDuplexStream<Buffer, Buffer>;
      call.once('data', () => call.end());
      call.once('error', rej);
      call.once('status', () => res());
      call.write(payload);
    });
  // One stream carrying every call: answers come back in order.
  const shared = client.bidi() as grpc.ClientDuplexStream<Buffer, Buffer>;
  const waiting: (() => void)[] = [];
  shared.on('data', () => waiting.shift()?.());
  // Closing the client cancels it; that is not a failure of the benchmark.
  shared.on('error', () => undefined);
  const multiplexed = () =>
    new Promise<void>((res) => {
      waiting.push(res);
      shared.write(payload);
    });
  return {
    unary,
    streamPerCall,
    multiplexed,
    close() {
      shared.end();
      client.close();
      server.forceShutdown();
    },
  };
}

/** `n` sequential unary echoes after a warm-up: the bare gRPC round trip, ms each. */
export async function echoBaseline(n: number): Promise<number[]> {
  const echo = await echoServer();
  try {
    for (let i = 0; i < 200; i++) await echo.unary();
    const samples: number[] = [];
    for (let i = 0; i < n; i++) samples.push(await timeIt(echo.unary));
    return samples;
  } finally {
    echo.close();
  }
}
