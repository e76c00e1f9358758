/**
 * The runner's stdio once its socket is in use, with a real runner process: the runner serves
 * nothing more on stdin and stdout (code in a run may be able to write there), and the
 * gateway's link never falls back to stdio once the socket was used.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { RunnerClient, type CallHooks } from '../../../gateway/src/runs/RunnerClient';
import { RunnerLink } from '../../../gateway/src/runs/connection/RunnerLink';
import { ProcessProvider } from '../../../gateway/src/sandbox/process';
import type { Sandbox } from '../../../gateway/src/sandbox/provider';
import { ShutdownRequest } from '../../../protocol/src/run';
import type { ToolResult } from '../../../protocol/src/tools';
import { PingRequest } from '../../../protocol/src/transport';

const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tether-stdio-'));
const provider = new ProcessProvider(stateDir, true);
after(async () => {
  await provider.close();
  rmSync(stateDir, { recursive: true, force: true });
});

const surface = { maxTier: 'write' } as never;
const never = new AbortController().signal;
const text = (r: ToolResult) => r.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');
const hooks: CallHooks = {
  progress: () => undefined,
  ask: async () => ({ kind: 'unavailable', reason: 'no one' }),
  bridge: async () => ({ content: [{ type: 'text', text: 'unused' }], isError: true }),
};
const features = {
  lsp: false,
  ast: false,
  debug: false,
  eval: false,
  questions: { enabled: false, targetSpace: 'test' },
  vibe: false,
};

async function newRunner(name: string): Promise<Sandbox> {
  return provider.create({
    runId: `run-${name}-${process.pid}`,
    tenant: 'acme',
    labels: {},
    limits: { memoryMb: 512, cpuMillis: 1000, pids: 256, diskMb: 64 },
  });
}

function frame(id: number, method: string): string {
  const body = JSON.stringify({ jsonrpc: '2.0', id, method, params: {} });
  return `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

test('once a socket connection passed the challenge, the runner serves nothing on its stdio', async () => {
  const sandbox = await newRunner('retired');
  const client = new RunnerClient(sandbox);
  try {
    await client.initialize(
      { runId: sandbox.runId, conversationId: 'stdio', workspace: sandbox.workspacePath, features, settings: {} },
      10_000,
    );
    assert.equal(client.transport, 'unix');
    const { stdin, stdout } = await sandbox.stdio();
    let answered = '';
    stdout.on('data', (d: Buffer) => (answered += d.toString()));
    // What code that reached the runner's stdin would send: a ping, then an order to stop.
    stdin.write(frame(7, PingRequest.type.method));
    stdin.write(frame(8, ShutdownRequest.type.method));
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(answered, '', 'nothing answered on stdout');
    writeFileSync(path.join(sandbox.workspacePath, 'a.txt'), 'still served\n');
    const read = await client.callTool('read', { path: 'a.txt' }, surface, hooks, never);
    assert.match(text(read), /still served/, 'the runner lives and serves its socket');
  } finally {
    client.dispose();
    await provider.remove(sandbox.id);
  }
});

test('a socket that fails after it was used is an error, never a fall back to stdio', async () => {
  const runner = await newRunner('taken');
  let stdioAsked = 0;
  const sandbox: Sandbox = { ...runner, stdio: () => (stdioAsked++, runner.stdio()) };
  const link = new RunnerLink(sandbox);
  const fake = net.createServer((s) => s.end(`${'ab'.repeat(16)} ${'00'.repeat(32)}\n`));
  try {
    const first = await link.open();
    assert.equal(first.kind, 'unix');
    first.close();
    // A process in the run puts its own listener where the socket was.
    const file = (runner.socket as { path: string }).path;
    rmSync(file);
    await new Promise<void>((r) => fake.listen(file, r));
    await assert.rejects(link.open(), /did not prove it is this run's runner .*only transport/);
    await assert.rejects(link.open(), /only transport/, 'and again on a retry');
    assert.equal(stdioAsked, 0, 'stdio was never opened');
    assert.equal(link.reconnectable, true);
  } finally {
    fake.close();
    await provider.remove(runner.id);
  }
});
