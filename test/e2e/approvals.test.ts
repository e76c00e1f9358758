import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import { Metadata, status, type ClientDuplexStream, type ServiceError } from '@grpc/grpc-js';
import {
  AgentKind,
  Approval,
  CallToolInputSchema,
  QuestionKind,
  SurfaceMode,
  Tier,
  type CallToolOutput,
  type Question,
} from '@tether/contract';
import { resultText, type AnswerInit } from '../../clients/typescript/src';
import { startTestGateway, type TestGateway } from '../helpers/gateway';

let t: TestGateway;
before(async () => {
  t = await startTestGateway();
});
after(async () => {
  await t?.close();
});

async function runWith(approvals: { write?: Approval; exec?: Approval }, features: Record<string, unknown> = {}) {
  const run = await t.alice.createRun({ approvals, features });
  assert.equal(run.error, '');
  return run.runId;
}

async function fileOf(runId: string, path: string): Promise<string | undefined> {
  const r = await t.alice.callTool(runId, 'read', { path });
  return r.result.isError ? undefined : resultText(r.result);
}

const approve = (): AnswerInit => ({ approved: true });

test('PROMPT approved: one PERMISSION card naming the tool and its arguments, then the call runs', async () => {
  const runId = await runWith({ write: Approval.PROMPT });
  const cards: Question[] = [];
  const r = await t.alice.callTool(
    runId,
    'write',
    { path: 'a.txt', content: 'approved content' },
    { onQuestion: (q) => (cards.push(q), approve()) },
  );
  assert.ok(!r.result.isError, resultText(r.result));
  assert.equal(cards.length, 1);
  assert.equal(cards[0].kind, QuestionKind.PERMISSION);
  assert.match(cards[0].question, /Allow write \(write tier\)\?/);
  assert.match(cards[0].context, /path: a\.txt\ncontent: approved content/);
  assert.deepEqual(
    cards[0].options.map((o) => [o.number, o.label]),
    [
      [1, 'Approve'],
      [2, 'Deny'],
    ],
  );
  assert.match((await fileOf(runId, 'a.txt'))!, /approved content/);
  // Choosing option 1 approves as well as the approved flag does.
  const byOption = await t.alice.callTool(
    runId,
    'edit',
    { path: 'a.txt', old_string: 'approved', new_string: 'chosen' },
    { onQuestion: () => ({ selected: [1] }) },
  );
  assert.ok(!byOption.result.isError, resultText(byOption.result));
  // A read-tier tool never asks.
  const read = await t.alice.callTool(runId, 'read', { path: 'a.txt' }, { onQuestion: approve });
  assert.equal(read.questions.length, 0);
  await t.alice.deleteRun(runId);
});

test("PROMPT denied: a refusal the model can read, with the human's reason, and nothing written", async () => {
  const runId = await runWith({ write: Approval.PROMPT });
  const r = await t.alice.callTool(
    runId,
    'write',
    { path: 'b.txt', content: 'x' },
    { onQuestion: () => ({ approved: false, freeText: 'not on Fridays' }) },
  );
  assert.equal(r.result.isError, true);
  assert.match(
    resultText(r.result),
    /refused: write was not approved \(the human did not approve it and wrote: not on Fridays\)/,
  );
  assert.equal(r.questions.length, 1);
  assert.equal(await fileOf(runId, 'b.txt'), undefined);
  const skipped = await t.alice.callTool(
    runId,
    'write',
    { path: 'b.txt', content: 'x' },
    { onQuestion: () => ({ skipped: true }) },
  );
  assert.equal(skipped.result.isError, true);
  assert.equal(await fileOf(runId, 'b.txt'), undefined);
  await t.alice.deleteRun(runId);
});

test('PROMPT with no human connected is refused at once, without a card (fail-closed)', async () => {
  const runId = await runWith({ write: Approval.PROMPT });
  const r = await t.alice.callTool(runId, 'write', { path: 'c.txt', content: 'x' });
  assert.equal(r.result.isError, true);
  assert.match(resultText(r.result), /no human is connected to approve it/);
  assert.equal(r.questions.length, 0);
  assert.equal(await fileOf(runId, 'c.txt'), undefined);
  await t.alice.deleteRun(runId);
});

test('a client that disconnects while a PERMISSION card is open: refused, nothing written, nothing left waiting', async () => {
  const runId = await runWith({ write: Approval.PROMPT });
  const md = new Metadata();
  md.set('authorization', 'Bearer token-alice');
  const call = t.alice.raw.callTool(md) as ClientDuplexStream<unknown, CallToolOutput>;
  const shown = new Promise<void>((resolve) =>
    call.on('data', (o: CallToolOutput) => o.msg.case === 'question' && resolve()),
  );
  const gone = new Promise<void>((resolve) => call.on('error', () => resolve()));
  call.write(
    create(CallToolInputSchema, {
      msg: {
        case: 'start',
        value: {
          runId,
          tool: 'write',
          argumentsJson: JSON.stringify({ path: 'gone.txt', content: 'x' }),
          acceptsQuestions: true,
        },
      },
    }),
  );
  await shown;
  call.cancel();
  await gone;
  // A late approval has no card to land on; the write never happened.
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(await fileOf(runId, 'gone.txt'), undefined);
  assert.equal(t.gateway.runs.get('alice', runId).runner!.busy, false);
  await t.alice.deleteRun(runId);
});

test('DENY refuses without asking; AUTO runs without asking', async () => {
  const denied = await runWith({ write: Approval.DENY });
  const r = await t.alice.callTool(denied, 'write', { path: 'd.txt', content: 'x' }, { onQuestion: approve });
  assert.equal(r.result.isError, true);
  assert.match(resultText(r.result), /policy denies write-tier tools, so write cannot run here/);
  assert.equal(r.questions.length, 0);
  assert.equal(await fileOf(denied, 'd.txt'), undefined);
  await t.alice.deleteRun(denied);

  const auto = await runWith({ write: Approval.AUTO });
  const ok = await t.alice.callTool(auto, 'write', { path: 'e.txt', content: 'auto' }, { onQuestion: approve });
  assert.ok(!ok.result.isError, resultText(ok.result));
  assert.equal(ok.questions.length, 0);
  assert.match((await fileOf(auto, 'e.txt'))!, /auto/);
  await t.alice.deleteRun(auto);
});

test('a tool() call bridged out of an eval cell goes through the same gate, exactly once', async (ctx) => {
  const runId = await runWith({ write: Approval.PROMPT, exec: Approval.PROMPT }, { eval: true });
  const tools = await t.alice.listTools(runId);
  if (!tools.some((x) => x.name === 'eval')) {
    await t.alice.deleteRun(runId);
    return ctx.skip('this build has no eval tool');
  }
  const code = [
    'for name in ["one.txt", "two.txt"]:',
    '    try:',
    '        tool("write", {"path": name, "content": "from a cell"})',
    '        print(name, "written")',
    '    except Exception as e:',
    '        print(name, "refused:", e)',
  ].join('\n');
  const cards: Question[] = [];
  const r = await t.alice.callTool(
    runId,
    'eval',
    { code, description: 'write two files through the bridge' },
    {
      // The eval itself, then one card per bridged write: approve the first write, deny the second.
      onQuestion: (q) => {
        cards.push(q);
        const writes = cards.filter((c) => c.question.startsWith('Allow write')).length;
        return q.question.startsWith('Allow eval') ? { approved: true } : { approved: writes === 1 };
      },
    },
  );
  const out = resultText(r.result);
  assert.ok(!r.result.isError, out);
  assert.deepEqual(
    cards.map((c) => c.question),
    ['Allow eval (exec tier)?', 'Allow write (write tier)?', 'Allow write (write tier)?'],
  );
  assert.ok(cards.every((c) => c.kind === QuestionKind.PERMISSION));
  assert.match(cards[1].context, /path: one\.txt/);
  assert.match(out, /one\.txt written/);
  assert.match(out, /two\.txt refused:.*not approved/);
  assert.match((await fileOf(runId, 'one.txt'))!, /from a cell/);
  assert.equal(await fileOf(runId, 'two.txt'), undefined);
  await t.alice.deleteRun(runId);
});

test('tier caps: on a PLAN surface and for a read-only subagent every tool is exactly the read tier', async () => {
  const runId = await runWith(
    {},
    {
      lsp: true,
      ast: true,
      debug: true,
      eval: true,
      vibe: true,
      questions: { enabled: true, targetSpace: 'conversation-1' },
    },
  );
  const all = await t.alice.listTools(runId);
  const readOnly = all
    .filter((x) => x.tier === Tier.READ)
    .map((x) => x.name)
    .sort();
  for (const name of ['read', 'ask_user', 'vibe_spawn', 'vibe_send', 'vibe_wait', 'vibe_kill', 'vibe_list'])
    assert.ok(readOnly.includes(name), `${name} is a read-tier tool of this run`);
  assert.ok(
    all.some((x) => x.tier !== Tier.READ),
    'the full list has write or exec tools to hide',
  );
  const above = all.filter((x) => x.tier !== Tier.READ).map((x) => x.name);

  for (const surface of [
    { mode: SurfaceMode.PLAN },
    { agent: AgentKind.READ_ONLY_SUBAGENT },
    { mode: SurfaceMode.PLAN, agent: AgentKind.READ_ONLY_SUBAGENT },
  ]) {
    const seen = await t.alice.listTools(runId, surface);
    assert.deepEqual(seen.map((x) => x.name).sort(), readOnly);
    assert.ok(seen.every((x) => x.tier === Tier.READ));
    // A hidden tool is answered exactly like a tool that does not exist.
    const missing = await t.alice.callTool(runId, 'no_such_tool', {}, { surface }).catch((e: ServiceError) => e);
    for (const name of above) {
      const err = (await t.alice.callTool(runId, name, {}, { surface }).catch((e: ServiceError) => e)) as ServiceError;
      assert.equal(err.code, status.NOT_FOUND, name);
      assert.equal(err.details, `unknown tool: ${name}`);
      assert.equal((missing as ServiceError).details, 'unknown tool: no_such_tool');
    }
  }
  await t.alice.deleteRun(runId);
});
