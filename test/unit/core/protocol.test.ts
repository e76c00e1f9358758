import { test } from 'node:test';
import { ResourcesEvent } from '../../../protocol/src/resources';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { PassThrough } from 'node:stream';
import { createMessageConnection, StreamMessageReader, StreamMessageWriter } from 'vscode-jsonrpc/node';
import { AskRequest, BridgeRequest, ProgressNotification } from '../../../protocol/src/calls';
import {
  CommandRequest,
  FamilyCommand,
  InitializeRequest,
  RunEventNotification,
  RunEventType,
  ShutdownRequest,
} from '../../../protocol/src/run';
import { CallToolRequest } from '../../../protocol/src/tools';
import { WatchersCommand, WorkerEvent, type WorkerEventPayload } from '../../../protocol/src/workers';
import { RunnerClient } from '../../../gateway/src/runs/RunnerClient';
import type { Sandbox } from '../../../gateway/src/sandbox/provider';
import { RunContext } from '../../../runner/src/run';
import { NO_FEATURES, tempWorkspace } from '../../helpers/runner';

const ROOT = path.resolve(__dirname, '../../../..');

test('the method names on the wire stay as they are: a restarted gateway re-attaches to runners of the old version', () => {
  const methods = [
    InitializeRequest,
    CallToolRequest,
    ShutdownRequest,
    CommandRequest,
    ProgressNotification,
    AskRequest,
    BridgeRequest,
    RunEventNotification,
  ].map((m) => m.type.method);
  assert.deepEqual(methods, [
    'runner/initialize',
    'tools/call',
    'runner/shutdown',
    'runner/command',
    'call/progress',
    'call/ask',
    'call/bridge',
    'run/event',
  ]);
  assert.deepEqual(
    [WatchersCommand.type.family, WatchersCommand.type.command, WorkerEvent.type.kind, ResourcesEvent.type.kind],
    ['vibe', 'watchers', 'vibe.worker', 'run.resources'],
  );
});

/** The gateway's RunnerClient and a runner-side RunContext joined by in-memory stdio. */
function connected() {
  const down = new PassThrough();
  const up = new PassThrough();
  const sandbox = {
    id: 's',
    runId: 'r',
    workspacePath: '/w',
    secret: Buffer.alloc(32),
    stdio: async () => ({ stdin: down, stdout: up }),
    exited: new Promise(() => undefined),
  } as unknown as Sandbox;
  const client = new RunnerClient(sandbox);
  const runner = createMessageConnection(new StreamMessageReader(down), new StreamMessageWriter(up));
  const run = new RunContext({
    runId: 'r',
    conversationId: 'c',
    workspace: tempWorkspace(),
    features: NO_FEATURES,
    settings: {},
  });
  runner.onRequest(CommandRequest.type, (params) => run.command(params));
  run.sendEvent = (event) => void runner.sendNotification(RunEventNotification.type, event);
  runner.listen();
  return { client, run, close: () => (client.dispose(), runner.dispose()) };
}

test('a family command reaches its handler in the runner and the typed reply comes back', async () => {
  const { client, run, close } = connected();
  const event: WorkerEventPayload = { seq: 3, kind: 'START', workerId: 'w1', label: 'w1', tier: 'fast', brief: 'b' };
  run.handleCommand(WatchersCommand.type, ({ count }) => ({ seq: count, events: [event] }));
  assert.deepEqual(await client.command(WatchersCommand.type, { count: 2 }), { seq: 2, events: [event] });
  await assert.rejects(
    client.command(new FamilyCommand<object, unknown>('vibe', 'nope'), {}),
    /unknown vibe command nope/,
  );
  await assert.rejects(
    client.command(new FamilyCommand<object, unknown>('lsp', 'probe'), {}),
    /no command handler for lsp in this run/,
  );
  close();
});

test('run events reach only the listeners of their kind', async () => {
  const { client, run, close } = connected();
  const got: WorkerEventPayload[] = [];
  client.onRunEvent(WorkerEvent.type, (e) => got.push(e));
  const event: WorkerEventPayload = { seq: 1, kind: 'KILL', workerId: 'w2', label: 'w2', tier: 'good', brief: 'b' };
  run.emit(new RunEventType<string>('other.kind'), 'not a worker event');
  run.emit(WorkerEvent.type, event);
  // Notifications carry no answer: a command after them marks when they have all arrived.
  run.handleCommand(new FamilyCommand<null, null>('test', 'sync'), () => null);
  await client.command(new FamilyCommand<null, null>('test', 'sync'), null);
  assert.deepEqual(got, [event]);
  close();
});

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(path.join(dir, e.name)) : e.name.endsWith('.ts') ? [path.join(dir, e.name)] : [],
  );
}

/** Every file of `from` that imports (even types) from one of `forbidden`, as "file → import". */
function importsInto(from: string, forbidden: string[]): string[] {
  const found: string[] = [];
  for (const file of sources(path.join(ROOT, from))) {
    for (const m of readFileSync(file, 'utf8').matchAll(/from '(\.[^']*)'/g)) {
      const target = path.relative(ROOT, path.resolve(path.dirname(file), m[1]));
      if (forbidden.some((f) => target === f || target.startsWith(f + path.sep)))
        found.push(`${path.relative(ROOT, file)} → ${m[1]}`);
    }
  }
  return found;
}

test('the gateway and the runner meet only in protocol/, which depends on neither', () => {
  assert.deepEqual(importsInto('gateway/src', ['runner']), [], 'the gateway image carries no runner code');
  assert.deepEqual(importsInto('runner/src', ['gateway']), []);
  assert.ok(importsInto('gateway/src', ['protocol']).length > 0, 'the scan sees the imports it looks for');
  assert.deepEqual(importsInto('protocol/src', ['gateway', 'runner']), []);
});

/** The files of `from` that import the package `name` (or one of its subpaths). */
function importersOf(from: string, name: string): string[] {
  return sources(path.join(ROOT, from))
    .filter((file) => new RegExp(`from '${name}(/[^']*)?'`).test(readFileSync(file, 'utf8')))
    .map((file) => path.relative(ROOT, file));
}

test('the gateway and @tether/client share the generated contract in contract/, and neither reaches into the other', () => {
  assert.deepEqual(importsInto('gateway/src', ['clients']), [], 'the server does not depend on its own client');
  assert.deepEqual(
    importersOf('gateway/src', '@tether/client'),
    ['gateway/src/clientCommands.ts'],
    "only the CLI's client-side commands use the client, through its package",
  );
  assert.ok(importersOf('gateway/src', '@tether/contract').length > 0, 'the scan sees the imports it looks for');
  // The client compiles and installs as its own package: the contract only by package name.
  assert.deepEqual(importsInto('clients/typescript/src', ['contract', 'gateway', 'protocol', 'runner']), []);
  assert.deepEqual(importsInto('contract/src', ['clients', 'gateway', 'protocol', 'runner']), []);
  const outputs = [...readFileSync(path.join(ROOT, 'buf.gen.yaml'), 'utf8').matchAll(/^\s*out:\s*(\S+)/gm)].map(
    (m) => m[1],
  );
  assert.deepEqual(outputs, ['contract/src/gen'], 'one generated copy of the protocol code');
});
