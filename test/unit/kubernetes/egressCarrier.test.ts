/**
 * The egress carriage of a kubernetes run, both ends for real but without a cluster: the
 * pod's carrier (runner/src/egressCarrier.ts) as a child process whose stdio stands in for the
 * exec stream, the gateway's end (EgressCarrier) piping what it carries to a stand-in proxy on
 * a Unix socket. Two carriers, as two replicas would exec them: one serves, and the other takes
 * over when the first one's stream ends.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { PassThrough } from 'node:stream';
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { EgressCarrier } from '../../../gateway/src/sandbox/kubernetes/egressCarrier';
import type { PodStream } from '../../../gateway/src/sandbox/kubernetes/streams';

const CARRIER = path.resolve(__dirname, '../../../runner/src/egressCarrier.js');
const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-carrier-'));
const podSocket = path.join(dir, 'pod', 'proxy.sock');
const children: ChildProcess[] = [];
const carriers: EgressCarrier[] = [];

after(() => {
  for (const c of carriers) c.close();
  for (const c of children) c.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

/** A stand-in for the run's proxy: answers each connection with its tag and echoes what it reads. */
function proxy(tag: string): Promise<{ socket: string; server: net.Server }> {
  const socket = path.join(dir, `${tag}.sock`);
  const server = net.createServer((c) => {
    c.write(`${tag}:`);
    c.pipe(c);
  });
  return new Promise((resolve) => server.listen(socket, () => resolve({ socket, server })));
}

/** The pod's carrier as a child process; its stdio is what an exec stream would be. */
function exec(): { open: () => Promise<PodStream>; child: () => ChildProcess | undefined } {
  let current: ChildProcess | undefined;
  return {
    child: () => current,
    open: async () => {
      const child = spawn(process.execPath, [CARRIER, podSocket], { stdio: ['pipe', 'pipe', 'pipe'] });
      children.push(child);
      current = child;
      let stderr = '';
      child.stderr!.on('data', (d) => (stderr += d));
      const stdout = new PassThrough();
      child.stdout!.pipe(stdout);
      const done = new Promise<{ status: string; message: string }>((resolve) =>
        child.once('exit', (code) => resolve({ status: code === 0 ? 'Success' : 'Failure', message: `exit ${code}` })),
      );
      return { stdin: child.stdin!, stdout, stderr: () => stderr, done, close: () => child.kill('SIGKILL') };
    },
  };
}

/** One connection through the pod's egress socket: what came back for `text`. */
function roundTrip(text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = net.connect(podSocket);
    let got = '';
    c.on('data', (d) => {
      got += d;
      if (got.endsWith(text)) {
        c.destroy();
        resolve(got);
      }
    });
    c.on('error', reject);
    c.write(text);
  });
}

async function eventually<T>(what: string, ms: number, probe: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      return await probe();
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`${what}: ${(err as Error).message}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

test('connections to the pod carrier reach the gateway proxy, several at once; a second carrier takes over when the first one goes', async () => {
  const a = await proxy('a');
  const b = await proxy('b');
  mkdirSync(path.dirname(podSocket), { recursive: true });
  const execA = exec();
  const first = new EgressCarrier({ runId: 'run-a', proxySocket: a.socket, open: execA.open });
  carriers.push(first);
  first.start();
  assert.equal(await eventually('the first carrier', 5000, () => roundTrip('hello')), 'a:hello');
  const many = await Promise.all(Array.from({ length: 20 }, (_, i) => roundTrip(`n${i}-${'x'.repeat(i * 5000)}`)));
  many.forEach((got, i) => assert.equal(got, `a:n${i}-${'x'.repeat(i * 5000)}`));

  // A second replica's carrier waits while the first one serves.
  const second = new EgressCarrier({ runId: 'run-a', proxySocket: b.socket, open: exec().open });
  carriers.push(second);
  second.start();
  await new Promise((r) => setTimeout(r, 1500));
  assert.equal(await roundTrip('still'), 'a:still');

  // The first replica goes (its carrier's stream ends; it is not opened again): the second carries.
  first.close();
  execA.child()!.kill('SIGKILL');
  assert.equal(await eventually('the second carrier to take over', 5000, () => roundTrip('after')), 'b:after');
  a.server.close();
  b.server.close();
});

test('a carrier whose proxy is gone ends the connection rather than hang', async () => {
  const gone = path.join(dir, 'nobody.sock');
  const execC = exec();
  // The last test's second carrier still holds the pod socket: this one is the next to serve.
  for (const c of carriers) c.close();
  for (const c of children) c.kill('SIGKILL');
  const carrier = new EgressCarrier({ runId: 'run-c', proxySocket: gone, open: execC.open });
  carriers.push(carrier);
  carrier.start();
  const ended = await eventually(
    'the carrier',
    5000,
    () =>
      new Promise<string>((resolve, reject) => {
        const c = net.connect(podSocket);
        let got = '';
        c.on('data', (d) => (got += d));
        c.on('close', () => resolve(`closed:${got}`));
        c.on('error', reject);
        c.write('x');
      }),
  );
  assert.equal(ended, 'closed:');
});
