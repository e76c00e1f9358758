import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  Approval,
  QuestionKind,
  Status,
  TetherClient,
  TetherError,
  VERSION,
  checkHealth,
  isTetherError,
} from '@tether/client';
import { startTestGateway, type TestGateway } from '../helpers/gateway';

// What the TypeScript client adds over the shared conformance suite: its handlers' edge cases,
// AbortSignal before a request, folders, and the typed error.
let t: TestGateway;
let c: TetherClient;
before(async () => {
  t = await startTestGateway({ provider: 'process' });
  c = new TetherClient(t.gateway.address, 'token-alice');
});
after(async () => {
  c?.close();
  await t?.close();
});

test('a refused request rejects with a TetherError carrying the code', async () => {
  const err = await c.getRun('run-that-does-not-exist').catch((e: unknown) => e);
  assert.ok(err instanceof TetherError);
  assert.equal(err.code, Status.NOT_FOUND);
  assert.equal(err.codeName, 'NOT_FOUND');
  assert.match(err.message, /^NOT_FOUND: /);
  assert.ok(err.details.length > 0);
  assert.match(VERSION, /^\d+\.\d+\.\d+$/);
});

test("health needs no token, on the client's own connection or a new one", async () => {
  const anonymous = new TetherClient(t.gateway.address, '');
  try {
    assert.equal(await anonymous.health(), 'SERVING');
    assert.equal(await anonymous.health(''), 'SERVING');
    await assert.rejects(anonymous.health('no.such.Service'), (e) => isTetherError(e, Status.NOT_FOUND));
    assert.equal(await checkHealth(t.gateway.address), 'SERVING');
  } finally {
    anonymous.close();
  }
});

test('an already aborted signal: nothing is sent, the request rejects with CANCELLED and the reason', async () => {
  const ac = new AbortController();
  ac.abort('not now');
  const before = (await c.listRuns()).length;
  await assert.rejects(
    c.createRun({}, { signal: ac.signal }),
    (e) => isTetherError(e, Status.CANCELLED) && e.details === 'not now',
  );
  assert.equal((await c.listRuns()).length, before);
  const run = await c.createRun({});
  await assert.rejects(c.callTool(run.runId, 'read', { path: 'x' }, { signal: ac.signal }), (e) =>
    isTetherError(e, Status.CANCELLED),
  );
  await c.deleteRun(run.runId);
});

test('onApproval decides PERMISSION cards; its reason reaches the model', async () => {
  const run = await c.createRun({ approvals: { write: Approval.PROMPT } });
  const seen: QuestionKind[] = [];
  const yes = await c.callTool(
    run.runId,
    'write',
    { path: 'ok.txt', content: 'fine\n' },
    { onApproval: (q) => (seen.push(q.kind), true) },
  );
  assert.equal(yes.isError, false, yes.text);
  const no = await c.callTool(
    run.runId,
    'write',
    { path: 'no.txt', content: 'x' },
    { onApproval: () => ({ approved: false, reason: 'not in prod' }) },
  );
  assert.equal(no.isError, true);
  assert.match(no.text, /not approved.*not in prod/);
  assert.deepEqual(seen, [QuestionKind.PERMISSION]);
  assert.deepEqual(Object.keys(await c.getFileMap(run.runId)), ['ok.txt']);
  await c.deleteRun(run.runId);
});

test('a question handler that throws ends the call with its error; the run is free again', async () => {
  const run = await c.createRun({ features: { questions: { enabled: true, targetSpace: 'ts' } } });
  await assert.rejects(
    c.callTool(
      run.runId,
      'ask_user',
      { question: 'Deploy?' },
      {
        onQuestion: () => {
          throw new Error('the card UI crashed');
        },
      },
    ),
    /the card UI crashed/,
  );
  const runner = t.gateway.runs.get('alice', run.runId).runner!;
  for (let i = 0; i < 100 && runner.busy; i++) await new Promise((r) => setTimeout(r, 50));
  assert.equal(runner.busy, false);
  const next = await c.callTool(
    run.runId,
    'ask_user',
    { question: 'Deploy now?' },
    { onQuestion: () => ({ freeText: 'yes' }) },
  );
  assert.match(next.text, /The user answered: yes/);
  await c.deleteRun(run.runId);
});

test('bridged calls: a string reply is the text; a handler that throws is a ToolError in the cell', async () => {
  const run = await c.createRun({ features: { eval: true } });
  const code =
    'print(tool("client_echo", {"say": "hi"}))\ntry:\n    tool("client_broken", {})\nexcept ToolError as e:\n    print("refused:", e)';
  const out = await c.callTool(
    run.runId,
    'eval',
    { code, description: 'echo then call a broken tool' },
    {
      onBridgeCall: (b, args) => {
        if (b.tool === 'client_broken') throw new Error('the service is down');
        return `echo ${(args as { say: string }).say}`;
      },
    },
  );
  assert.equal(out.isError, false, out.text);
  assert.match(out.text, /echo hi\nrefused: the service is down/);
  assert.deepEqual(
    out.bridgeCalls.map((b) => b.tool),
    ['client_echo', 'client_broken'],
  );
  await c.deleteRun(run.runId);
});

test('folders: put a local folder, get it back as a map and into another folder', async () => {
  const run = await c.createRun({});
  const src = mkdtempSync(path.join(os.tmpdir(), 'tether-ts-src-'));
  mkdirSync(path.join(src, 'lib'));
  writeFileSync(path.join(src, 'lib', 'auth.dart'), 'class Auth {}\n');
  writeFileSync(path.join(src, 'README.md'), '# app\n');
  const put = await c.putFolder(run.runId, src, 'app');
  assert.equal(put.filesWritten, 2);
  const map = await c.getFileMap(run.runId, 'app');
  assert.deepEqual(Object.fromEntries(Object.entries(map).map(([k, v]) => [k, v.toString()])), {
    'app/lib/auth.dart': 'class Auth {}\n',
    'app/README.md': '# app\n',
  });
  const dest = mkdtempSync(path.join(os.tmpdir(), 'tether-ts-dest-'));
  await c.getFolder(run.runId, dest);
  assert.equal(readFileSync(path.join(dest, 'app', 'lib', 'auth.dart'), 'utf8'), 'class Auth {}\n');
  await c.deleteRun(run.runId);
});
