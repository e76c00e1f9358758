/**
 * The floor of a tool call's design, with no tether code in it: a bare grpc-js server (one
 * bidirectional stream, raw bytes, no protobuf) whose handler makes one JSON-RPC round trip over
 * a unix socket to a second process before it answers, as the gateway does to a runner. Both
 * are child processes, so their CPU is read from /proc like tether's own. `bench/cpu-per-call.ts`
 * measures it beside tether's `read` in the same run.
 *
 * As a script: `node dist/bench/callFloor.js gateway|runner <socket>` (started by `startCallFloor`).
 */
import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';

const raw = (b: Buffer) => b;
const ECHO: grpc.ServiceDefinition = {
  Call: {
    path: '/floor.Floor/Call',
    requestStream: true,
    responseStream: true,
    requestSerialize: raw,
    requestDeserialize: raw,
    responseSerialize: raw,
    responseDeserialize: raw,
  },
};

const frame = (body: string) => {
  const b = Buffer.from(body);
  return Buffer.concat([Buffer.from(`Content-Length: ${b.length}\r\n\r\n`), b]);
};

/** Content-Length framed messages out of a byte stream. */
function framed(onMessage: (body: Buffer) => void): (chunk: Buffer) => void {
  let buf: Buffer = Buffer.alloc(0);
  return (chunk) => {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    for (;;) {
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const length = Number(/Content-Length: (\d+)/.exec(buf.subarray(0, end).toString())?.[1]);
      if (buf.length < end + 4 + length) return;
      onMessage(buf.subarray(end + 4, end + 4 + length));
      buf = buf.subarray(end + 4 + length);
    }
  };
}

function serveRunner(socket: string): void {
  net
    .createServer((s) =>
      s.on(
        'data',
        framed((body) => {
          const { id } = JSON.parse(body.toString()) as { id: number };
          s.write(
            frame(JSON.stringify({ jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: 'hello' }] } })),
          );
        }),
      ),
    )
    .listen(socket, () => process.send?.('ready'));
}

function serveGateway(socket: string): void {
  const runner = net.connect(socket);
  const pending = new Map<number, (result: unknown) => void>();
  let next = 0;
  runner.on(
    'data',
    framed((body) => {
      const { id, result } = JSON.parse(body.toString()) as { id: number; result: unknown };
      pending.get(id)?.(result);
      pending.delete(id);
    }),
  );
  const server = new grpc.Server({ 'grpc.enable_channelz': 0 });
  server.addService(ECHO, {
    Call: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => {
      call.on('data', (args: Buffer) => {
        const id = ++next;
        pending.set(id, (result) => call.write(Buffer.from(JSON.stringify(result))));
        runner.write(frame(`{"jsonrpc":"2.0","id":${id},"method":"tool/call","params":${args.toString()}}`));
      });
      call.on('end', () => call.end());
    },
  });
  server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => {
    if (err) throw err;
    process.send?.(String(port));
  });
}

export interface CallFloor {
  gatewayPid: number;
  runnerPid: number;
  /** One call on the shared stream: the arguments out, the answer back. */
  call(): Promise<void>;
  close(): Promise<void>;
}

/** Starts the floor's two processes and a client stream to it. */
export async function startCallFloor(): Promise<CallFloor> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-floor-'));
  const socket = path.join(dir, 'runner.sock');
  const start = async (role: string): Promise<[ChildProcess, string]> => {
    const child = fork(__filename, [role, socket], { stdio: 'inherit' });
    const [message] = (await once(child, 'message')) as [string];
    return [child, message];
  };
  const [runner] = await start('runner');
  const [gateway, port] = await start('gateway');
  const Client = grpc.makeGenericClientConstructor(ECHO, 'Floor');
  const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), { 'grpc.enable_channelz': 0 });
  const stream = (client as unknown as { Call(): grpc.ClientDuplexStream<Buffer, Buffer> }).Call();
  let answered: () => void = () => undefined;
  stream.on('data', () => answered());
  stream.on('error', () => undefined); // the gateway's end, at close
  const args = Buffer.from('{"name":"read","arguments":{"path":"main.py"}}');
  return {
    gatewayPid: gateway.pid!,
    runnerPid: runner.pid!,
    call: () =>
      new Promise<void>((resolve) => {
        answered = resolve;
        stream.write(args);
      }),
    async close() {
      stream.end();
      client.close();
      for (const child of [gateway, runner]) {
        child.kill();
        await once(child, 'exit');
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

if (require.main === module) {
  const [role, socket] = process.argv.slice(2);
  if (role === 'runner') serveRunner(socket);
  else if (role === 'gateway') serveGateway(socket);
  else throw new Error('usage: callFloor.js gateway|runner <socket>');
}
