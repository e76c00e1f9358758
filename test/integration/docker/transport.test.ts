/**
 * The runner's connections through real Docker: the socket fast path, a second gateway on the
 * same run, refused connections, the secret out of the run's reach, re-attach through the
 * socket, and the stdio fallback.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { status } from '@grpc/grpc-js';
import { after, before, test } from 'node:test';
import { resultText, TetherClient } from '../../../clients/typescript/src';
import { toStatus } from '../../../gateway/src/grpc/edge';
import type { ToolResult } from '../../../protocol/src/tools';
import { RunState } from '@tether/contract';
import { RunnerClient, type CallHooks } from '../../../gateway/src/runs/RunnerClient';
import { runSecret, socketDir } from '../../../gateway/src/sandbox/boot';
import { type Sandbox, SandboxUnreachableError } from '../../../gateway/src/sandbox/provider';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { DockerProvider } from '../../../gateway/src/sandbox/docker';
import { containerOf, containersOf, dockerConfig, execIn, removeInstance, until } from './support';
import { PID1_PROBE, pid1Findings, RUNNER_SCRIPT } from './pid1Probe';
import { assertStrangersRefused } from '../../helpers/rawExchange';
import { freePort } from '../../helpers/ports';

let t: TestGateway;
const instance = `transport-${process.pid}`;
const features = { questions: { enabled: true, targetSpace: 'test' }, eval: true };

before(async () => {
  t = await startTestGateway({ provider: 'docker', docker: dockerConfig(), instance });
});
after(async () => {
  await t?.close();
  await removeInstance(instance);
});

/** The text of a result from either side: gRPC's (through the client) or the runner protocol's. */
const text = (r: Parameters<typeof resultText>[0]) => resultText(r);
const rpcText = (r: ToolResult) => r.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');

async function newRun(files: Record<string, string> = {}) {
  const run = await t.alice.createRun({ conversationId: 'transport', features });
  assert.equal(run.state, RunState.READY, run.error);
  if (Object.keys(files).length) await t.alice.putFileMap(run.runId, files);
  return run.runId;
}

const runnerOf = (runId: string) => t.gateway.runs.ready('alice', runId).runner;

/** A second gateway's end of the run: the real RunnerClient, reaching the runner by its socket only. */
async function secondGateway(
  runId: string,
  stateDir = t.config.stateDir,
  socketPath = path.join(socketDir(stateDir, runId), 'runner.sock'),
): Promise<RunnerClient> {
  const sandbox: Sandbox = {
    id: `second-${runId}`,
    runId,
    workspacePath: '/workspace',
    secret: await runSecret(stateDir, runId),
    socket: { path: socketPath },
    stdio: () => Promise.reject(new Error('a second gateway has no stdio')),
    exited: new Promise(() => undefined),
    putArchive: () => Promise.reject(new Error('unused')),
    getArchive: () => Promise.reject(new Error('unused')),
  };
  return new RunnerClient(sandbox);
}

const hooks = (name: string): CallHooks => ({
  progress: () => undefined,
  ask: async () => ({ kind: 'answered', selected: [], freeText: `answer from ${name}` }),
  bridge: async (tool) => ({ content: [{ type: 'text', text: `bridged by ${name}: ${tool}` }], isError: false }),
});

test('the gateway reaches a Docker run through its socket, not the engine', async () => {
  const runId = await newRun({ 'a.txt': 'hello\n' });
  assert.equal(runnerOf(runId).transport, 'unix');
  const out = await t.alice.callTool(runId, 'read', { path: 'a.txt' });
  assert.match(text(out.result), /hello/);
  await t.alice.deleteRun(runId);
});

test('two gateways on one run: calls, questions and bridged calls each reach their own caller', async () => {
  const runId = await newRun({ 'a.txt': 'shared file\n' });
  const second = await secondGateway(runId);
  const init = await second.initialize(initParams(runId), 10000);
  const tools = init.tools.map((x) => x.name).sort();
  assert.deepEqual(
    tools,
    t.gateway.runs
      .ready('alice', runId)
      .tools.map((x) => x.name)
      .sort(),
    'the same tools, without initializing again',
  );
  assert.ok(tools.includes('ask_user') && tools.includes('eval'), tools.join(','));
  assert.equal(second.transport, 'unix');
  const surface = { maxTier: 'write' } as never;
  const never = new AbortController().signal;
  const rounds = 5;
  const [viaGrpc, viaSecond] = await Promise.all([
    Promise.all(
      Array.from({ length: rounds }, async (_, i) => {
        const asked = await t.alice.callTool(
          runId,
          'ask_user',
          { question: `first gateway ${i}?` },
          { onQuestion: () => ({ freeText: `answer from grpc ${i}` }) },
        );
        const bridged = await t.alice.callTool(runId, 'eval', {
          code: 'print(tool("read", {"path": "a.txt"}))',
          description: 'bridge through the first gateway',
        });
        return { asked: text(asked.result), bridged: text(bridged.result) };
      }),
    ),
    Promise.all(
      Array.from({ length: rounds }, async (_, i) => {
        const asked = await second.callTool(
          'ask_user',
          { question: `second gateway ${i}?` },
          surface,
          hooks(`second ${i}`),
          never,
        );
        const bridged = await second.callTool(
          'eval',
          { code: 'print(tool("read", {"path": "a.txt"}))', description: 'bridge through the second gateway' },
          surface,
          hooks(`second ${i}`),
          never,
        );
        return { asked: rpcText(asked), bridged: rpcText(bridged) };
      }),
    ),
  ]);
  viaGrpc.forEach((r, i) => {
    assert.match(r.asked, new RegExp(`answer from grpc ${i}\\b`));
    assert.match(r.bridged, /shared file/);
    assert.doesNotMatch(r.bridged, /bridged by/);
  });
  viaSecond.forEach((r, i) => {
    assert.match(r.asked, new RegExp(`answer from second ${i}\\b`));
    assert.match(r.bridged, new RegExp(`bridged by second ${i}: read`));
  });
  second.dispose();
  await t.alice.deleteRun(runId);
});

test('a connection without the secret, with a wrong one, or sending garbage is closed; the run goes on', async () => {
  const runId = await newRun({ 'a.txt': 'still served\n' });
  await assertStrangersRefused(
    () => net.connect(path.join(socketDir(t.config.stateDir, runId), 'runner.sock')),
    /still served/,
  );
  const out = await t.alice.callTool(runId, 'read', { path: 'a.txt' });
  assert.match(text(out.result), /still served/);
  await t.alice.deleteRun(runId);
});

test('code in the run cannot read the secret: not in the environment, files, /proc of the runner', async () => {
  const runId = await newRun();
  const secret = (await runSecret(t.config.stateDir, runId)).toString('hex');
  const probe = [
    'import os, glob',
    // Written backwards: the probe's own source must not hold the secret it looks for.
    `secret = "${[...secret].reverse().join('')}"[::-1]`,
    'found, denied = [], []',
    'for p in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline") + glob.glob("/run/tether/*"):',
    '    try:',
    '        with open(p, "rb") as f: data = f.read(1 << 20)',
    '        if secret.encode() in data or bytes.fromhex(secret) in data: found.append(p)',
    '    except Exception as e: denied.append(p)',
    // The runner itself (not the init that started it, which holds no secret).
    `runner = [d for d in glob.glob("/proc/[0-9]*") if open(d + "/cmdline", "rb").read().split(b"\\0")[1:2] == [b"${RUNNER_SCRIPT}"]]`,
    'mem = []',
    'for d in runner:',
    '    try:',
    '        f = open(d + "/mem", "rb")',
    '    except Exception as e:',
    '        mem.append("denied"); continue',
    '    hit = False',
    '    for line in open(d + "/maps"):',
    '        a, b = (int(x, 16) for x in line.split()[0].split("-"))',
    '        if "r" not in line.split()[1] or b - a > 1 << 28: continue',
    '        try:',
    '            f.seek(a); chunk = f.read(b - a)',
    '        except Exception: continue',
    '        if secret.encode() in chunk or bytes.fromhex(secret) in chunk: hit = True',
    '    mem.append("found" if hit else "read, not found")',
    'print("FOUND", found, "MEM", mem, "ENVSECRET", any(secret in v for v in os.environ.values()))',
  ].join('\n');
  const out = await t.alice.callTool(runId, 'eval', { code: probe, description: 'look for the run secret' });
  const said = text(out.result);
  assert.match(said, /FOUND \[\]/, said);
  assert.match(said, /ENVSECRET False/, said);
  assert.match(said, /MEM \['denied'\]/, said);
  // The same from a process the engine starts in the container as the run's user.
  const scan =
    'import glob, sys\ns = sys.argv[1][::-1].encode()\nfor p in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):\n  try:\n    if s in open(p, "rb").read(): print(p)\n  except OSError: pass\nprint("done")';
  const exec = await execIn(await containerOf(runId), ['python3', '-c', scan, [...secret].reverse().join('')]);
  assert.equal(exec.stdout.trim(), 'done', exec.stdout + exec.stderr);
  await t.alice.deleteRun(runId);
});

test('PID 1 and the runner give code in the run nothing: their descriptors refused, nothing injected', async () => {
  const runId = await newRun({ 'a.txt': 'still served\n' });
  const out = await t.alice.callTool(runId, 'eval', { code: PID1_PROBE, description: 'probe PID 1 and the runner' });
  const found = pid1Findings(text(out.result));
  assert.equal(found.init, '/usr/local/bin/tini-private', 'PID 1 is the execute-only tini');
  for (const [what, got] of Object.entries(found)) if (what !== 'init') assert.equal(got, 'EACCES', `${what}: ${got}`);
  assert.match(text((await t.alice.callTool(runId, 'read', { path: 'a.txt' })).result), /still served/);
  assert.equal(runnerOf(runId).transport, 'unix');
  await t.alice.deleteRun(runId);
});

/** Code in the run that puts its own listener where the runner's socket was, answering a wrong proof. */
const PLANT_SOCKET = `
import os, socket, threading
path = '/run/tether/runner.sock'
os.unlink(path)
fake = socket.socket(socket.AF_UNIX)
fake.bind(path)
os.chmod(path, 0o666)
fake.listen(8)
def serve():
    while True:
        c, _ = fake.accept()
        c.recv(4096)
        c.sendall(b'ab' * 16 + b' ' + b'00' * 32 + b'\\n')
        c.close()
threading.Thread(target=serve, daemon=True).start()
print('planted')
`;

test('a restarted gateway that finds the socket taken over removes the run; it never turns to stdio', async () => {
  const plantInstance = `${instance}-planted`;
  const first = await startTestGateway({ provider: 'docker', docker: dockerConfig(), instance: plantInstance });
  let second: TestGateway | undefined;
  let firstOpen = true;
  try {
    const run = await first.alice.createRun({ conversationId: 'planted', features });
    assert.equal(run.state, RunState.READY, run.error);
    const planted = await first.alice.callTool(run.runId, 'eval', {
      code: PLANT_SOCKET,
      description: 'plant a listener in place of the socket',
    });
    assert.match(text(planted.result), /planted/);
    first.alice.close();
    first.bob.close();
    await first.gateway.close({ keepRuns: true });
    firstOpen = false;
    // The real provider, watched: what the restarted gateway attaches and whether it asks for stdio.
    const provider = new DockerProvider(first.config);
    const attach = provider.attach.bind(provider);
    let attached = 0;
    let stdioAsked = 0;
    provider.attach = async (id) => {
      attached++;
      const sandbox = await attach(id);
      return { ...sandbox, stdio: () => (stdioAsked++, sandbox.stdio()) };
    };
    second = await startTestGateway(
      { provider: 'docker', docker: dockerConfig(), instance: plantInstance, stateDir: first.config.stateDir },
      provider,
    );
    assert.equal(attached, 1, 'the run was found and attached');
    assert.equal(stdioAsked, 0, 'stdio was never opened');
    assert.deepEqual(await second.alice.listRuns(), [], 'a run whose socket fails its proof is not re-attached');
    await until('its container removed', async () => (await containersOf(run.runId)).length === 0, 30_000);
  } finally {
    if (firstOpen) await first.close();
    await second?.close();
    await removeInstance(plantInstance);
  }
});

test('a restarted gateway re-attaches through the socket; one with another state directory leaves the run be', async () => {
  const restartInstance = `${instance}-restart`;
  const first = await startTestGateway({ provider: 'docker', docker: dockerConfig(), instance: restartInstance });
  let second: TestGateway | undefined;
  try {
    const run = await first.alice.createRun({ conversationId: 'restart' });
    assert.equal(run.state, RunState.READY, run.error);
    await first.alice.putFileMap(run.runId, { 'kept.txt': 'through a restart\n' });
    first.alice.close();
    first.bob.close();
    await first.gateway.close({ keepRuns: true });

    // The same instance with another state directory holds another transport key: it cannot
    // prove itself to the runner (whose stdio is retired), says so at once, and removes nothing.
    const elsewhere = await startTestGateway({ provider: 'docker', docker: dockerConfig(), instance: restartInstance });
    assert.deepEqual(await elsewhere.alice.listRuns(), []);
    const provider = new DockerProvider(elsewhere.config);
    await assert.rejects(
      provider.attach((await containerOf(run.runId)).id),
      (e) =>
        e instanceof SandboxUnreachableError &&
        e.message.includes(`started with state directory ${first.config.stateDir}, not ${elsewhere.config.stateDir}`),
    );
    await provider.close();
    await elsewhere.close();
    assert.equal((await containersOf(run.runId)).length, 1, 'the run is left in place');
    second = await startTestGateway({
      provider: 'docker',
      docker: dockerConfig(),
      instance: restartInstance,
      stateDir: first.config.stateDir,
    });
    assert.equal(second.gateway.runs.ready('alice', run.runId).runner.transport, 'unix');
    const out = await second.alice.callTool(run.runId, 'read', { path: 'kept.txt' });
    assert.match(text(out.result), /through a restart/);
    await second.alice.deleteRun(run.runId);
  } finally {
    await second?.close();
    await removeInstance(restartInstance);
  }
});

test('with the fast path off the run works over stdio', async () => {
  const offInstance = `${instance}-stdio`;
  const off = await startTestGateway({
    provider: 'docker',
    docker: dockerConfig(),
    instance: offInstance,
    fastPath: false,
  });
  try {
    const run = await off.alice.createRun({ conversationId: 'stdio' });
    assert.equal(run.state, RunState.READY, run.error);
    assert.equal(off.gateway.runs.ready('alice', run.runId).runner.transport, 'stdio');
    await off.alice.putFileMap(run.runId, { 'b.txt': 'over stdio\n' });
    assert.match(text((await off.alice.callTool(run.runId, 'read', { path: 'b.txt' })).result), /over stdio/);
    await off.alice.deleteRun(run.runId);
  } finally {
    await off.close();
    await removeInstance(offInstance);
  }
});

const initParams = (runId: string) => ({
  runId,
  conversationId: 'transport',
  workspace: '/workspace',
  features: {
    lsp: false,
    ast: false,
    debug: false,
    eval: true,
    questions: { enabled: true, targetSpace: 'test' },
    vibe: false,
  },
  settings: {},
});

/**
 * A Unix socket in front of the runner's, forwarding bytes both ways: cutting its connections
 * drops the gateway's connection while the runner lives on. `sent` holds what the gateway wrote
 * on each connection.
 */
async function relay(target: string) {
  const file = path.join(mkdtempSync(path.join(os.tmpdir(), 'tether-relay-')), 'relay.sock');
  const pairs = new Set<[net.Socket, net.Socket]>();
  let sent = '';
  const server = net.createServer((front) => {
    const back = net.connect(target);
    const pair: [net.Socket, net.Socket] = [front, back];
    pairs.add(pair);
    front.on('data', (d: Buffer) => (sent += d.toString('latin1')));
    front.pipe(back).pipe(front);
    const end = () => (front.destroy(), back.destroy(), pairs.delete(pair));
    front.on('error', end).on('close', end);
    back.on('error', end).on('close', end);
  });
  server.listen(file);
  await once(server, 'listening');
  return {
    file,
    sent: () => sent,
    connections: () => pairs.size,
    cut() {
      for (const [front, back] of pairs) front.destroy(), back.destroy();
      pairs.clear();
    },
    close: () => server.close(),
  };
}

test('a connection that drops while the runner lives: the call in flight ends UNAVAILABLE, unsent calls go on the new one', async () => {
  const runId = await newRun({ 'a.txt': 'still here\n' });
  const r = await relay(path.join(socketDir(t.config.stateDir, runId), 'runner.sock'));
  const client = await secondGateway(runId, t.config.stateDir, r.file);
  try {
    await client.initialize(initParams(runId), 10000);
    assert.equal(client.transport, 'unix');
    const surface = { maxTier: 'write' } as never;
    const never = new AbortController().signal;
    // In flight for sure: the runner is waiting on the question it asked, which nobody answers.
    let asked: () => void = () => undefined;
    const askedOnce = new Promise<void>((res) => (asked = res));
    const inFlight = client.callTool(
      'ask_user',
      { question: 'will the connection hold?' },
      surface,
      { ...hooks('relay'), ask: () => (asked(), new Promise(() => undefined)) },
      never,
    );
    inFlight.catch(() => undefined);
    await askedOnce;
    r.cut();
    // Made after the drop, before the new connection: sent on the new one, not lost.
    const unsent = Promise.allSettled(
      Array.from({ length: 3 }, () => client.callTool('read', { path: 'a.txt' }, surface, hooks('relay'), never)),
    );
    await assert.rejects(inFlight, (err: Error) => toStatus(err).code === status.UNAVAILABLE);
    for (const out of await unsent) {
      assert.equal(out.status, 'fulfilled', out.status === 'rejected' ? String(out.reason) : '');
      if (out.status === 'fulfilled') assert.match(rpcText(out.value), /still here/);
    }
    assert.equal(client.transport, 'unix');
    assert.equal(r.connections(), 1, 'one new connection');
    assert.equal(client.failure, undefined);
    // The runner lived through it: the run's own gateway never noticed.
    assert.match(text((await t.alice.callTool(runId, 'read', { path: 'a.txt' })).result), /still here/);
  } finally {
    client.dispose();
    r.close();
    await t.alice.deleteRun(runId);
  }
});

/** `tether serve` as its own process, with its stderr (the log) kept. */
function serve(env: Record<string, string>) {
  const child = spawn(process.execPath, [path.resolve(__dirname, '../../../../bin/tether'), 'serve'], {
    env: {
      ...process.env,
      TETHER_LOG_LEVEL: 'info',
      TETHER_IMAGE: dockerConfig().image,
      TETHER_PROVIDER: 'docker',
      TETHER_POOL_SIZE: '0',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  child.stdout!.on('data', (d: Buffer) => (log += d.toString()));
  const ready = new Promise<void>((resolve, reject) => {
    child.stderr!.on('data', (d: Buffer) => ((log += d.toString()), /listening on/.test(log) && resolve()));
    child.once('exit', (code) => reject(new Error(`gateway exited with ${code}: ${log}`)));
  });
  return { child, ready, log: () => log };
}

const linesOf = (log: string, msg: string) =>
  log
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { msg?: string; runId?: string; transport?: string; reason?: string })
    .filter((l) => l.msg === msg);

test('a gateway killed outright (SIGKILL) reconnects through the socket when it comes back', async () => {
  const killInstance = `${instance}-kill`;
  const port = await freePort();
  const env = {
    TETHER_TOKENS: 'kill-token=acme',
    TETHER_INSTANCE: killInstance,
    TETHER_LISTEN: `127.0.0.1:${port}`,
    TETHER_HTTP_LISTEN: 'off',
    TETHER_STATE_DIR: mkdtempSync(path.join(os.tmpdir(), 'tether-kill-')),
  };
  const client = new TetherClient(`127.0.0.1:${port}`, 'kill-token');
  let second: ReturnType<typeof serve> | undefined;
  try {
    const first = serve(env);
    await first.ready;
    const run = await client.createRun({ conversationId: 'kill' });
    assert.equal(run.state, RunState.READY, run.error);
    await client.putFileMap(run.runId, { 'kept.txt': 'through a kill\n' });
    first.child.kill('SIGKILL');
    await once(first.child, 'exit');

    second = serve(env);
    await second.ready;
    assert.equal((await client.getRun(run.runId)).state, RunState.READY);
    assert.match(text((await client.callTool(run.runId, 'read', { path: 'kept.txt' })).result), /through a kill/);
    const log = second.log();
    assert.deepEqual(
      linesOf(log, 'runner connected')
        .filter((l) => l.runId === run.runId)
        .map((l) => l.transport),
      ['unix'],
      log,
    );
    assert.equal(linesOf(log, 'runner transport: using stdio').length, 0, log);
    await client.deleteRun(run.runId);
  } finally {
    client.close();
    second?.child.kill('SIGINT');
    if (second) await once(second.child, 'exit');
    await removeInstance(killInstance);
  }
});

test('the stdio fallback logs its reason once per run', async () => {
  const offInstance = `${instance}-fallback`;
  const port = await freePort();
  const gw = serve({
    TETHER_TOKENS: 'off-token=acme',
    TETHER_INSTANCE: offInstance,
    TETHER_LISTEN: `127.0.0.1:${port}`,
    TETHER_HTTP_LISTEN: 'off',
    TETHER_STATE_DIR: mkdtempSync(path.join(os.tmpdir(), 'tether-off-')),
    TETHER_FAST_PATH: '0',
  });
  const client = new TetherClient(`127.0.0.1:${port}`, 'off-token');
  try {
    await gw.ready;
    const run = await client.createRun({ conversationId: 'fallback' });
    assert.equal(run.state, RunState.READY, run.error);
    await client.putFileMap(run.runId, { 'b.txt': 'over stdio\n' });
    for (let i = 0; i < 5; i++)
      assert.match(text((await client.callTool(run.runId, 'read', { path: 'b.txt' })).result), /over stdio/);
    const fellBack = linesOf(gw.log(), 'runner transport: using stdio').filter((l) => l.runId === run.runId);
    assert.equal(fellBack.length, 1, gw.log());
    assert.match(fellBack[0].reason ?? '', /fastPath is off|no socket/);
    await client.deleteRun(run.runId);
  } finally {
    client.close();
    gw.child.kill('SIGINT');
    await once(gw.child, 'exit');
    await removeInstance(offInstance);
  }
});
