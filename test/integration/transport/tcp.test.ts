/**
 * The runner's TCP transport with a real runner process on 127.0.0.1, reached the way a
 * Kubernetes run with `kubernetes.transport: tcp` is: the gateway's RunnerClient knows only an
 * address and port, has no stdio to fall back to, and passes the run's challenge. Calls work;
 * connections without the secret, with a wrong one or sending garbage are closed and harm no
 * other connection; a connection that drops is opened again.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { status } from '@grpc/grpc-js';
import { after, before, test } from 'node:test';
import { toStatus } from '../../../gateway/src/grpc/edge';
import { RunnerClient, type CallHooks } from '../../../gateway/src/runs/RunnerClient';
import { ProcessProvider } from '../../../gateway/src/sandbox/process';
import type { Sandbox } from '../../../gateway/src/sandbox/provider';
import type { ToolResult } from '../../../protocol/src/tools';
import { assertStrangersRefused } from '../../helpers/rawExchange';

const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tether-tcp-'));
const provider = new ProcessProvider(stateDir, true, 'tcp');
const runId = `run-tcp-${process.pid}`;
let runner: Sandbox;
let port = 0;

const surface = { maxTier: 'write' } as never;
const never = new AbortController().signal;
const text = (r: ToolResult) => r.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');
const hooks: CallHooks = {
  progress: () => undefined,
  ask: async () => ({ kind: 'answered', selected: [], freeText: 'answered over tcp' }),
  bridge: async () => ({ content: [{ type: 'text', text: 'unused' }], isError: true }),
};
const initParams = {
  runId,
  conversationId: 'tcp',
  workspace: '',
  features: {
    lsp: false,
    ast: false,
    debug: false,
    eval: false,
    questions: { enabled: true, targetSpace: 'test' },
    vibe: false,
  },
  settings: {},
};

/** The sandbox as a replica of the kubernetes provider holds it with `transport: tcp`. */
function byAddress(target: { host: string; port: number }, secret = runner.secret): Sandbox {
  return {
    ...runner,
    secret,
    socket: target,
    socketOnly: true,
    stdio: () => Promise.reject(new Error('reached by address only: no stdio')),
  };
}

before(async () => {
  runner = await provider.create({
    runId,
    tenant: 'acme',
    labels: {},
    limits: { memoryMb: 512, cpuMillis: 1000, pids: 256, diskMb: 64 },
  });
  const socket = runner.socket as { host: string; port: number };
  assert.equal(socket.host, '127.0.0.1');
  assert.ok(socket.port > 0);
  port = socket.port;
  initParams.workspace = runner.workspacePath;
  writeFileSync(path.join(runner.workspacePath, 'a.txt'), 'served over tcp\n');
});

after(async () => {
  await provider.close();
  rmSync(stateDir, { recursive: true, force: true });
});

test('calls over TCP to the runner: initialize, a read, a question answered', async () => {
  const client = new RunnerClient(byAddress({ host: '127.0.0.1', port }));
  try {
    const init = await client.initialize(initParams, 10_000);
    assert.ok(init.tools.some((t) => t.name === 'read'));
    assert.equal(client.transport, 'tcp');
    assert.match(text(await client.callTool('read', { path: 'a.txt' }, surface, hooks, never)), /served over tcp/);
    const asked = await client.callTool('ask_user', { question: 'over tcp?' }, surface, hooks, never);
    assert.match(text(asked), /answered over tcp/);
  } finally {
    client.dispose();
  }
});

test('no secret, a wrong one, garbage: closed; a connection already open goes on', async () => {
  const client = new RunnerClient(byAddress({ host: '127.0.0.1', port }));
  try {
    await client.initialize(initParams, 10_000);
    await assertStrangersRefused(() => net.connect(port, '127.0.0.1'), /served over tcp/);

    // The gateway's side holding the wrong secret: the runner's proof does not match it, and
    // the gateway refuses to go on (it would otherwise talk to whoever holds the port).
    const wrong = new RunnerClient(byAddress({ host: '127.0.0.1', port }, randomBytes(32)));
    await assert.rejects(wrong.initialize(initParams, 10_000), /did not prove/);
    wrong.dispose();

    assert.match(text(await client.callTool('read', { path: 'a.txt' }, surface, hooks, never)), /served over tcp/);
    assert.equal(client.failure, undefined);
    assert.equal((await client.ping(5000)).runId, runId);
  } finally {
    client.dispose();
  }
});

/** A TCP relay on 127.0.0.1 in front of the runner's port, whose connections the test can cut. */
async function relay() {
  const pairs = new Set<[net.Socket, net.Socket]>();
  let opened = 0;
  const server = net.createServer((front) => {
    opened++;
    const back = net.connect(port, '127.0.0.1');
    const pair: [net.Socket, net.Socket] = [front, back];
    pairs.add(pair);
    front.pipe(back).pipe(front);
    const end = () => (front.destroy(), back.destroy(), pairs.delete(pair));
    front.on('error', end).on('close', end);
    back.on('error', end).on('close', end);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    port: (server.address() as net.AddressInfo).port,
    opened: () => opened,
    cut() {
      for (const [front, back] of pairs) front.destroy(), back.destroy();
      pairs.clear();
    },
    close: () => server.close(),
  };
}

test('a dropped TCP connection is opened again: the call in flight ends UNAVAILABLE, unsent calls go on the new one', async () => {
  const r = await relay();
  const client = new RunnerClient(byAddress({ host: '127.0.0.1', port: r.port }));
  try {
    await client.initialize(initParams, 10_000);
    assert.equal(client.transport, 'tcp');
    let asked: () => void = () => undefined;
    const askedOnce = new Promise<void>((res) => (asked = res));
    const inFlight = client.callTool(
      'ask_user',
      { question: 'will the connection hold?' },
      surface,
      { ...hooks, ask: () => (asked(), new Promise(() => undefined)) },
      never,
    );
    inFlight.catch(() => undefined);
    await askedOnce;
    r.cut();
    await assert.rejects(inFlight, (err: Error) => toStatus(err).code === status.UNAVAILABLE);
    // Made once the drop is seen, before the new connection is up: they wait for it and go on
    // it. (Over TCP, unlike a Unix socket, a write to a peer that has just closed succeeds: a
    // call written in that instant has left and ends UNAVAILABLE like one in flight.)
    const unsent = Promise.allSettled(
      Array.from({ length: 3 }, () => client.callTool('read', { path: 'a.txt' }, surface, hooks, never)),
    );
    for (const out of await unsent) {
      assert.equal(out.status, 'fulfilled', out.status === 'rejected' ? String(out.reason) : '');
      if (out.status === 'fulfilled') assert.match(text(out.value), /served over tcp/);
    }
    assert.equal(r.opened(), 2, 'one new connection');
    assert.equal(client.transport, 'tcp');
    assert.equal(client.failure, undefined);
    // Twice more: each drop is mended, and the runner's run state is the same throughout.
    for (let i = 0; i < 2; i++) {
      const before = r.opened();
      r.cut();
      // Once the client has noticed: a call written before that could have left on the dead one.
      while (r.opened() === before) await new Promise((res) => setTimeout(res, 10));
      assert.match(text(await client.callTool('read', { path: 'a.txt' }, surface, hooks, never)), /served over tcp/);
    }
    assert.equal(r.opened(), 4);
    assert.equal((await client.ping(5000)).runId, runId);
  } finally {
    client.dispose();
    r.close();
  }
});
