import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { PassThrough } from 'node:stream';
import { createMessageConnection, StreamMessageReader, StreamMessageWriter } from 'vscode-jsonrpc/node';
import { BindRequest, InitializeRequest, PrepareRequest, type RunFeatures } from '../../../protocol/src/run';
import { PingRequest } from '../../../protocol/src/transport';
import { Sessions } from '../../../runner/src/connections/sessions';

const FEATURES: RunFeatures = {
  lsp: false,
  ast: false,
  debug: false,
  eval: false,
  questions: { enabled: false, targetSpace: '' },
  vibe: false,
};

/** A runner's sessions with one gateway connection to them over in-memory streams. */
function runner() {
  const sessions = new Sessions('test', async () => undefined);
  const connect = () => {
    const up = new PassThrough();
    const down = new PassThrough();
    sessions.serve(new StreamMessageReader(up), new StreamMessageWriter(down), 'test', up);
    const gateway = createMessageConnection(new StreamMessageReader(down), new StreamMessageWriter(up));
    gateway.listen();
    return gateway;
  };
  return { context: () => sessions.context, connect };
}

test('a prepared runner has no run until bound, then serves that run only', async () => {
  const workspace = mkdtempSync(path.join(os.tmpdir(), 'tether-sessions-'));
  const { context, connect } = runner();
  const gw = connect();
  await assert.rejects(
    gw.sendRequest(BindRequest.type, { runId: 'run-a', conversationId: '', features: FEATURES }),
    /not prepared/,
  );
  assert.deepEqual(await gw.sendRequest(PrepareRequest.type, { workspace, settings: {} }), { version: 'test' });
  // A re-adopting gateway may prepare an unbound runner again.
  await gw.sendRequest(PrepareRequest.type, { workspace, settings: { files: {} } });
  assert.equal((await gw.sendRequest(PingRequest.type)).runId, null);
  assert.equal(context(), undefined, 'nothing of a run before the bind');

  const bound = await gw.sendRequest(BindRequest.type, { runId: 'run-a', conversationId: 'c', features: FEATURES });
  assert.ok(bound.tools.some((t) => t.name === 'write'));
  assert.equal(context()?.runId, 'run-a');
  assert.equal(context()?.workspace.root, workspace);
  assert.equal((await gw.sendRequest(PingRequest.type)).runId, 'run-a');

  // A second connection (a reconnect, a restarted gateway) reaches the same run, never another.
  const again = connect();
  const init = await again.sendRequest(InitializeRequest.type, {
    runId: 'run-a',
    conversationId: 'c',
    workspace: '/elsewhere',
    features: FEATURES,
    settings: {},
  });
  assert.deepEqual(init, bound);
  await assert.rejects(
    again.sendRequest(BindRequest.type, { runId: 'run-b', conversationId: '', features: FEATURES }),
    /belongs to run run-a/,
  );
  await assert.rejects(again.sendRequest(PrepareRequest.type, { workspace, settings: {} }), /bound to run run-a/);
  await assert.rejects(
    again.sendRequest(InitializeRequest.type, {
      runId: 'run-b',
      conversationId: '',
      workspace,
      features: FEATURES,
      settings: {},
    }),
    /bound to run run-a|belongs to run run-a/,
  );
  assert.equal(context()?.runId, 'run-a');
  gw.dispose();
  again.dispose();
});

test('initialize prepares and binds in one, also on a runner only prepared', async () => {
  const workspace = mkdtempSync(path.join(os.tmpdir(), 'tether-sessions-'));
  const { context, connect } = runner();
  const gw = connect();
  await assert.rejects(gw.sendRequest(PrepareRequest.type, { workspace: 'relative', settings: {} }), /absolute/);
  await gw.sendRequest(PrepareRequest.type, { workspace: '/not-this-one', settings: {} });
  const init = await gw.sendRequest(InitializeRequest.type, {
    runId: 'run-c',
    conversationId: '',
    workspace,
    features: FEATURES,
    settings: {},
  });
  assert.ok(init.tools.length > 0);
  assert.equal(context()?.runId, 'run-c');
  assert.equal(context()?.workspace.root, workspace, 'the initialize names the workspace');
  gw.dispose();
});
