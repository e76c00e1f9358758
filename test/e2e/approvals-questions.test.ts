import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import { Metadata, type ClientDuplexStream } from '@grpc/grpc-js';
import { CallToolInputSchema, QuestionKind, type CallToolOutput, type Question } from '@tether/contract';
import { resultText } from '../../clients/typescript/src';
import { startTestGateway, type TestGateway } from '../helpers/gateway';

// Short enough to test a timeout; every other card here is answered at once.
const TIMEOUT_SECONDS = 2;
let t: TestGateway;
let runId: string;

before(async () => {
  t = await startTestGateway({ questions: { timeoutSeconds: TIMEOUT_SECONDS } });
  const run = await t.alice.createRun({ features: { questions: { enabled: true, targetSpace: 'conversation-42' } } });
  assert.equal(run.error, '');
  runId = run.runId;
});
after(async () => {
  await t?.close();
});

const db = {
  question: 'Which database should the service use?',
  context: 'I will assume Postgres if nobody answers.',
  options: [{ label: 'Postgres', description: 'the default' }, { label: 'SQLite' }],
};

test('ask_user needs questions wired with a target space', async () => {
  const plain = await t.alice.createRun({});
  assert.ok(!(await t.alice.listTools(plain.runId)).some((x) => x.name === 'ask_user'));
  await t.alice.deleteRun(plain.runId);
  await assert.rejects(t.alice.createRun({ features: { questions: { enabled: true } } }), /needs a target_space/);
});

test('answered: the card is numbered, shown in the target space, and the choice comes back', async () => {
  const r = await t.alice.callTool(runId, 'ask_user', db, { onQuestion: () => ({ selected: [2] }) });
  assert.ok(!r.result.isError, resultText(r.result));
  assert.equal(r.questions.length, 1);
  const q = r.questions[0];
  assert.equal(q.kind, QuestionKind.ASK);
  assert.equal(q.targetSpace, 'conversation-42');
  assert.equal(q.context, db.context);
  assert.deepEqual(
    q.options.map((o) => [o.number, o.label, o.description]),
    [
      [1, 'Postgres', 'the default'],
      [2, 'SQLite', ''],
    ],
  );
  assert.equal(q.allowFreeText, false);
  assert.match(resultText(r.result), /The user chose 2\. SQLite/);
  assert.deepEqual(JSON.parse(r.result.structuredJson), {
    status: 'answered',
    selected: [{ number: 2, label: 'SQLite' }],
  });

  const typed = await t.alice.callTool(
    runId,
    'ask_user',
    { question: 'What should the binary be called?' },
    { onQuestion: () => ({ freeText: 'tetherd' }) },
  );
  assert.match(resultText(typed.result), /The user answered: tetherd/);
  const several = await t.alice.callTool(
    runId,
    'ask_user',
    { ...db, multi_select: true, options: [...db.options, { label: 'MySQL' }] },
    { onQuestion: () => ({ selected: [1, 3] }) },
  );
  assert.match(resultText(several.result), /1\. Postgres[\s\S]*3\. MySQL/);
});

test('skipped: a success telling the model to go on under its assumption and not ask again', async () => {
  const cache = { ...db, question: 'Should the cache be shared between tenants?' };
  const r = await t.alice.callTool(runId, 'ask_user', cache, { onQuestion: () => ({ skipped: true }) });
  assert.ok(!r.result.isError);
  assert.match(
    resultText(r.result),
    /skipped this question\. Go on under the assumption you stated, and do not ask this question again\./,
  );
  // Asked again anyway: the human is not shown the card a second time.
  const again = await t.alice.callTool(runId, 'ask_user', cache, { onQuestion: () => ({ selected: [1] }) });
  assert.ok(!again.result.isError);
  assert.equal(again.questions.length, 0);
  assert.match(resultText(again.result), /already asked in this run and skipped/);
});

test('timed out: an error with the same instruction', async () => {
  const r = await t.alice.callTool(
    runId,
    'ask_user',
    { ...db, question: 'Which region should it deploy to?' },
    { onQuestion: () => new Promise(() => undefined) },
  );
  assert.equal(r.result.isError, true);
  assert.match(
    resultText(r.result),
    /Nobody answered this question in time\. Go on under the assumption you stated, and do not ask this question again\./,
  );
});

test('no human connected: fails at once, no card is shown', async () => {
  const r = await t.alice.callTool(runId, 'ask_user', db);
  assert.equal(r.result.isError, true);
  assert.equal(r.questions.length, 0);
  assert.match(resultText(r.result), /No human can answer right now \(no human is connected to this call/);
});

test('bad answers are rejected and the card stays open with the reason, until a valid answer', async () => {
  const bad = [{ selected: [3] }, { selected: [1, 2] }, { freeText: 'Oracle' }];
  const r = await t.alice.callTool(runId, 'ask_user', db, { onQuestion: () => bad.shift() ?? { selected: [1] } });
  assert.ok(!r.result.isError, resultText(r.result));
  assert.deepEqual(
    r.questions.map((q) => q.rejectedReason),
    [
      '',
      'option 3 does not exist; choose 1 to 2',
      'only one option may be selected on this card',
      'this card does not accept a typed answer; pick an option',
    ],
  );
  assert.equal(new Set(r.questions.map((q) => q.id)).size, 1, 'the same card is shown again');
  assert.match(resultText(r.result), /The user chose 1\. Postgres/);
});

test('a client that disconnects while the card is open ends the call; nothing is left waiting', async () => {
  const md = new Metadata();
  md.set('authorization', 'Bearer token-alice');
  const call = t.alice.raw.callTool(md) as ClientDuplexStream<unknown, CallToolOutput>;
  const question = new Promise<Question>((resolve) =>
    call.on('data', (o: CallToolOutput) => o.msg.case === 'question' && resolve(o.msg.value)),
  );
  const ended = new Promise<void>((resolve) => call.on('error', () => resolve()));
  call.write(
    create(CallToolInputSchema, {
      msg: {
        case: 'start',
        value: { runId, tool: 'ask_user', argumentsJson: JSON.stringify(db), acceptsQuestions: true },
      },
    }),
  );
  await question;
  const runner = t.gateway.runs.get('alice', runId).runner!;
  assert.equal(runner.busy, true, 'the call waits on the card');
  call.cancel();
  await ended;
  const deadline = Date.now() + TIMEOUT_SECONDS * 1000 - 500;
  while (runner.busy && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  assert.equal(runner.busy, false, 'the runner let go of the call before the card could time out');
  // The run still answers afterwards.
  const next = await t.alice.callTool(runId, 'ask_user', db, { onQuestion: () => ({ selected: [1] }) });
  assert.ok(!next.result.isError);
});

test('a client that half-closes its side while the card is open gets the failure as the result', async () => {
  const md = new Metadata();
  md.set('authorization', 'Bearer token-alice');
  const call = t.alice.raw.callTool(md) as ClientDuplexStream<unknown, CallToolOutput>;
  const outputs: CallToolOutput[] = [];
  const ended = new Promise<void>((resolve, reject) => {
    call.on('data', (o: CallToolOutput) => {
      outputs.push(o);
      if (o.msg.case === 'question') call.end();
    });
    call.on('end', resolve);
    call.on('error', reject);
  });
  call.write(
    create(CallToolInputSchema, {
      msg: {
        case: 'start',
        value: { runId, tool: 'ask_user', argumentsJson: JSON.stringify(db), acceptsQuestions: true },
      },
    }),
  );
  await ended;
  const last = outputs[outputs.length - 1];
  assert.equal(last.msg.case, 'result');
  assert.equal(last.msg.case === 'result' && last.msg.value.isError, true);
  assert.match(last.msg.case === 'result' ? resultText(last.msg.value) : '', /closed its side of the stream/);
});

test('another tenant cannot ask on this run', async () => {
  await assert.rejects(t.bob.callTool(runId, 'ask_user', db, { onQuestion: () => ({ selected: [1] }) }), /not found/);
});
