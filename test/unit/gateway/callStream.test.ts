import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { Metadata, type ServerDuplexStream } from '@grpc/grpc-js';
import type { MessageConnection, CancellationToken } from 'vscode-jsonrpc/node';
import {
  CallToolInputSchema,
  QuestionKind,
  ToolResultSchema,
  type CallToolInput,
  type CallToolOutput,
  type CallToolStart,
} from '@tether/contract';
import { ToolInvoker } from '../../../gateway/src/calls/ToolInvoker';
import { serveCallTool, streamSink } from '../../../gateway/src/grpc/callTool';
import { assembleRuns } from '../../../gateway/src/server';
import { CallStream } from '../../../gateway/src/grpc/callStream';
import { CallToolRequest, type CallToolParams, type ToolResult } from '../../../protocol/src/tools';
import { AskRequest, BridgeRequest, ProgressNotification, type QuestionOutcome } from '../../../protocol/src/calls';
import { answersInitialize, FakeProvider, runSpec, testConfig } from './fakeSandbox';

type Out = CallToolOutput['msg'];
type In = MessageInitShape<typeof CallToolInputSchema>['msg'];

/** The gRPC side of one CallTool stream, as the handler sees it; records what is written. */
class FakeCall extends EventEmitter {
  readonly metadata = new Metadata();
  readonly out: Out[] = [];
  cancelled = false;
  destroyed = false;
  writableEnded = false;
  failure: unknown;

  write(m: CallToolOutput): boolean {
    this.out.push(m.msg);
    this.emit('out', m.msg);
    return true;
  }

  end(): void {
    this.writableEnded = true;
    this.emit('ended');
  }

  getDeadline(): number {
    return Infinity;
  }

  send(msg: In): void {
    this.emit('data', create(CallToolInputSchema, { msg }) as CallToolInput);
  }

  /** The next output of a kind (or one already written and not yet taken). */
  next<C extends NonNullable<Out['case']>>(kind: C, taken = new Set<Out>()): Promise<Extract<Out, { case: C }>> {
    const have = this.out.find((o) => o.case === kind && !taken.has(o));
    if (have) return Promise.resolve(have as Extract<Out, { case: C }>);
    return new Promise((resolve) => {
      const on = (o: Out) => {
        if (o.case !== kind) return;
        this.off('out', on);
        resolve(o as Extract<Out, { case: C }>);
      };
      this.on('out', on);
    });
  }

  get ended(): Promise<void> {
    return this.writableEnded || this.failure ? Promise.resolve() : new Promise((r) => this.once('ended', () => r()));
  }
}

type ToolHandler = (p: CallToolParams, conn: MessageConnection, token: CancellationToken) => Promise<ToolResult>;

/** A READY run whose fake runner answers `echo` with `handler`, and one CallTool stream on it. */
async function callOn(handler: ToolHandler, start: { acceptsQuestions?: boolean; acceptsBridgeCalls?: boolean } = {}) {
  const provider = new FakeProvider((conn, sb) => {
    answersInitialize(conn, sb);
    conn.onRequest(CallToolRequest.type, (p: CallToolParams, token: CancellationToken) => handler(p, conn, token));
  });
  const runs = assembleRuns(testConfig(), provider);
  const run = await runs.lifecycle.create(
    'alice',
    runSpec({ features: { questions: { enabled: true, targetSpace: 'space-1' } } }),
  );
  const call = new FakeCall();
  serveCallTool(
    call as unknown as ServerDuplexStream<CallToolInput, CallToolOutput>,
    'alice',
    (err) => {
      call.failure = err;
      call.emit('ended');
    },
    { runs: runs.registry, tenancy: runs.tenancy, invoker: new ToolInvoker(), questionTimeoutSeconds: 5 },
  );
  call.send({ case: 'start', value: { runId: run.runId, callId: 'c-1', tool: 'echo', argumentsJson: '{}', ...start } });
  return { call, close: () => runs.close(false) };
}

const text = (t: string): ToolResult => ({ content: [{ type: 'text', text: t }] });
const results = (call: FakeCall) => call.out.filter((o) => o.case === 'result');
const resultText = (o: Out) =>
  o.case === 'result' ? o.value.content.map((c) => (c.item.case === 'text' ? c.item.value : '')).join('') : '';

test('progress reaches the stream in order, then exactly one result ends it', async () => {
  const { call, close } = await callOn(async (p, conn) => {
    await conn.sendNotification(ProgressNotification.type, { callId: p.callId, text: 'one' });
    await conn.sendNotification(ProgressNotification.type, { callId: p.callId, text: 'two' });
    return text('done');
  });
  await call.ended;
  assert.deepEqual(
    call.out.map((o) => o.case),
    ['progress', 'progress', 'result'],
  );
  assert.deepEqual(
    call.out.slice(0, 2).map((o) => (o.case === 'progress' ? o.value.text : '')),
    ['one', 'two'],
  );
  assert.equal(resultText(call.out[2]), 'done');
  assert.equal(call.failure, undefined);
  await close();
});

test('a question card: an invalid answer is sent back with the reason, a valid one reaches the runner', async () => {
  const { call, close } = await callOn(
    async (p, conn) => {
      const outcome: QuestionOutcome = await conn.sendRequest(AskRequest.type, {
        callId: p.callId,
        card: {
          question: 'Which?',
          options: [{ label: 'A' }, { label: 'B' }],
          allowFreeText: false,
          multiSelect: false,
        },
      });
      return text(JSON.stringify(outcome));
    },
    { acceptsQuestions: true },
  );
  const q = await call.next('question');
  assert.equal(q.value.kind, QuestionKind.ASK);
  assert.equal(q.value.targetSpace, 'space-1');
  assert.deepEqual(
    q.value.options.map((o) => [o.number, o.label]),
    [
      [1, 'A'],
      [2, 'B'],
    ],
  );
  call.send({ case: 'answer', value: { questionId: q.value.id, selected: [5] } });
  const again = await call.next('question', new Set([q]));
  assert.equal(again.value.id, q.value.id);
  assert.match(again.value.rejectedReason, /option 5 does not exist/);
  call.send({ case: 'answer', value: { questionId: q.value.id, selected: [2] } });
  await call.ended;
  assert.equal(results(call).length, 1);
  assert.deepEqual(JSON.parse(resultText(results(call)[0])), { kind: 'answered', selected: [2] });
  await close();
});

test('without a human on the stream, a question is unavailable and no card is shown', async () => {
  const { call, close } = await callOn(async (p, conn) => {
    const outcome: QuestionOutcome = await conn.sendRequest(AskRequest.type, {
      callId: p.callId,
      card: { question: 'Which?', options: [], allowFreeText: true, multiSelect: false },
    });
    return text(outcome.kind);
  });
  await call.ended;
  assert.deepEqual(
    call.out.map((o) => o.case),
    ['result'],
  );
  assert.equal(resultText(call.out[0]), 'unavailable');
  await close();
});

test('a bridged call to a tool the gateway does not own goes to the client, and its result back to the runner', async () => {
  const { call, close } = await callOn(
    async (p, conn) => {
      const r: ToolResult = await conn.sendRequest(BridgeRequest.type, {
        callId: p.callId,
        tool: 'client_search',
        arguments: { q: 'x' },
      });
      return text(`client said: ${r.content.map((c) => (c.type === 'text' ? c.text : '')).join('')}`);
    },
    { acceptsBridgeCalls: true },
  );
  const b = await call.next('bridgeCall');
  assert.equal(b.value.tool, 'client_search');
  assert.deepEqual(JSON.parse(b.value.argumentsJson), { q: 'x' });
  call.send({
    case: 'bridgeResult',
    value: {
      bridgeId: b.value.bridgeId,
      result: create(ToolResultSchema, { content: [{ item: { case: 'text', value: 'found it' } }] }),
    },
  });
  await call.ended;
  assert.equal(results(call).length, 1);
  assert.equal(resultText(results(call)[0]), 'client said: found it');
  await close();
});

test('a client that cannot take bridged calls: the runner hears "unknown tool", the client hears nothing', async () => {
  const { call, close } = await callOn(async (p, conn) => {
    const r: ToolResult = await conn.sendRequest(BridgeRequest.type, {
      callId: p.callId,
      tool: 'client_search',
      arguments: {},
    });
    return text(r.content.map((c) => (c.type === 'text' ? c.text : '')).join(''));
  });
  await call.ended;
  assert.deepEqual(
    call.out.map((o) => o.case),
    ['result'],
  );
  assert.equal(resultText(call.out[0]), 'unknown tool: client_search');
  await close();
});

test('cancel reaches the runner as a cancellation, open cards close, and one result still ends the stream', async () => {
  let sawCancel = false;
  const { call, close } = await callOn(
    async (p, conn, token) => {
      const asked: Promise<QuestionOutcome> = conn.sendRequest(AskRequest.type, {
        callId: p.callId,
        card: { question: 'Go on?', options: [{ label: 'yes' }], allowFreeText: false, multiSelect: false },
      });
      await new Promise<void>((resolve) => token.onCancellationRequested(() => resolve()));
      sawCancel = true;
      const outcome = await asked;
      return { content: [{ type: 'text', text: `stopped; the card was ${outcome.kind}` }], isError: true };
    },
    { acceptsQuestions: true },
  );
  await call.next('question');
  call.send({ case: 'cancel', value: { reason: 'user pressed stop' } });
  await call.ended;
  assert.ok(sawCancel, 'the runner was told');
  assert.equal(results(call).length, 1);
  assert.equal(resultText(results(call)[0]), 'stopped; the card was unavailable');
  await close();
});

test('the first message must be start; an unknown tool is NOT_FOUND', async () => {
  const { call, close } = await callOn(async () => text('never'));
  await call.ended;
  const bad = new FakeCall();
  const runs = assembleRuns(testConfig(), new FakeProvider());
  serveCallTool(
    bad as unknown as ServerDuplexStream<CallToolInput, CallToolOutput>,
    'alice',
    (err) => {
      bad.failure = err;
    },
    { runs: runs.registry, tenancy: runs.tenancy, invoker: new ToolInvoker(), questionTimeoutSeconds: 5 },
  );
  bad.send({ case: 'cancel', value: { reason: 'x' } });
  assert.match(String((bad.failure as Error).message), /first message must be start/);
  const run = await runs.lifecycle.create('alice', runSpec());
  const absent = new FakeCall();
  serveCallTool(
    absent as unknown as ServerDuplexStream<CallToolInput, CallToolOutput>,
    'alice',
    (err) => {
      absent.failure = err;
      absent.emit('ended');
    },
    { runs: runs.registry, tenancy: runs.tenancy, invoker: new ToolInvoker(), questionTimeoutSeconds: 5 },
  );
  absent.send({ case: 'start', value: { runId: run.runId, tool: 'nope', argumentsJson: '{}' } });
  await absent.ended;
  assert.match(String((absent.failure as Error).message), /unknown tool: nope/);
  await runs.close(false);
  await close();
});

/** A CallStream whose sink is a fake CallTool stream. */
const callStreamOn = (call: FakeCall, start: CallToolStart) =>
  new CallStream(
    streamSink(call as unknown as ServerDuplexStream<CallToolInput, CallToolOutput>, () => undefined),
    start,
    '',
    60,
  );

test("the stream's close after the result stops nothing, unless a bridged call of the call is still under way", async () => {
  const start = create(CallToolInputSchema, { msg: { case: 'start', value: { runId: 'r', tool: 'echo' } } }).msg
    .value as CallToolStart;
  const done = new FakeCall();
  const quiet = callStreamOn(done, start);
  quiet.finish({ content: [{ type: 'text', text: 'ok' }] });
  // grpc-js reports the close of every stream as 'cancelled', a finished one too.
  done.emit('cancelled');
  assert.equal(quiet.signal.aborted, false);

  const busy = new FakeCall();
  const stream = callStreamOn(busy, start);
  let release: () => void = () => undefined;
  const bridged = stream.during(
    () =>
      new Promise<string>((resolve) => {
        release = () => resolve(String(stream.signal.reason));
      }),
  );
  stream.finish({ content: [{ type: 'text', text: 'left a bridged call running' }] });
  busy.emit('cancelled');
  assert.equal(stream.signal.aborted, true);
  release();
  assert.equal(await bridged, 'the client went away');

  // Before the result, the close cancels the call as ever.
  const early = new FakeCall();
  const open = callStreamOn(early, start);
  early.emit('cancelled');
  assert.equal(open.signal.aborted, true);
});
