import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { Metadata, status, type ServerDuplexStream } from '@grpc/grpc-js';
import type { CancellationToken } from 'vscode-jsonrpc/node';
import { CallsInputSchema, type CallsInput, type CallsOutput } from '@tether/contract';
import { ToolInvoker } from '../../../gateway/src/calls/ToolInvoker';
import { CallsDrain, serveCalls } from '../../../gateway/src/grpc/calls';
import { assembleRuns } from '../../../gateway/src/server';
import type { GatewayError } from '../../../gateway/src/errors';
import { AskRequest, type QuestionOutcome } from '../../../protocol/src/calls';
import { CallToolRequest, type CallToolParams } from '../../../protocol/src/tools';
import { answersInitialize, FakeProvider, runSpec, testConfig, until } from './fakeSandbox';

/** The gRPC side of one Calls stream, as the handler sees it; records what is written. */
class FakeStream extends EventEmitter {
  readonly metadata = new Metadata();
  readonly out: CallsOutput[] = [];
  cancelled = false;
  destroyed = false;
  writableEnded = false;
  failure?: GatewayError;

  write(m: CallsOutput): boolean {
    this.out.push(m);
    return true;
  }

  end(): void {
    this.writableEnded = true;
  }

  send(init: MessageInitShape<typeof CallsInputSchema>): void {
    this.emit('data', create(CallsInputSchema, init) as CallsInput);
  }

  of(callId: string): CallsOutput['msg'][] {
    return this.out.filter((o) => o.callId === callId).map((o) => o.msg);
  }

  /** The call's last message, once it ended (a result or an error). */
  async outcome(callId: string): Promise<string> {
    await until(() => this.of(callId).some((m) => m.case === 'error' || m.value?.msg.case === 'result'));
    const last = this.of(callId).at(-1)!;
    if (last.case === 'error') return `error ${status[last.value.code]}: ${last.value.message}`;
    const r = last.case === 'output' && last.value.msg.case === 'result' ? last.value.msg.value : undefined;
    return r!.content.map((c) => (c.item.case === 'text' ? c.item.value : '')).join('');
  }
}

type Handler = (
  p: CallToolParams,
  ask: (q: string) => Promise<QuestionOutcome>,
  token: CancellationToken,
) => Promise<string>;

/** A READY run whose fake runner answers `echo` with `handler`, and one Calls stream. */
async function streamOn(handler: Handler, perSecond = 1000) {
  const provider = new FakeProvider((conn, sb) => {
    answersInitialize(conn, sb);
    conn.onRequest(CallToolRequest.type, async (p: CallToolParams, token: CancellationToken) => {
      const ask = (question: string): Promise<QuestionOutcome> =>
        conn.sendRequest(AskRequest.type, {
          callId: p.callId,
          card: { question, options: [{ label: 'A' }, { label: 'B' }], allowFreeText: false, multiSelect: false },
        });
      return { content: [{ type: 'text' as const, text: await handler(p, ask, token) }] };
    });
  });
  const config = testConfig();
  config.tenancy = { ...config.tenancy, default: { callTool: { perSecond, burst: perSecond } } };
  const runs = assembleRuns(config, provider);
  const run = await runs.lifecycle.create(
    'alice',
    runSpec({ features: { questions: { enabled: true, targetSpace: 'space-1' } } }),
  );
  const stream = new FakeStream();
  const drain = new CallsDrain();
  serveCalls(
    stream as unknown as ServerDuplexStream<CallsInput, CallsOutput>,
    'alice',
    (err) => {
      stream.failure = err as GatewayError;
    },
    { runs: runs.registry, tenancy: runs.tenancy, invoker: new ToolInvoker(), questionTimeoutSeconds: 5 },
    drain,
  );
  const start = (callId: string, args: object = {}, more: { acceptsQuestions?: boolean; runId?: string } = {}) =>
    stream.send({
      callId,
      input: {
        msg: {
          case: 'start',
          value: {
            runId: more.runId ?? run.runId,
            tool: 'echo',
            argumentsJson: JSON.stringify(args),
            acceptsQuestions: more.acceptsQuestions,
          },
        },
      },
    });
  return { stream, start, drain, runs, close: () => runs.close(false) };
}

test('calls on one stream run side by side: each message carries its call id, each call ends once', async () => {
  const { stream, start, close } = await streamOn(async (p, ask) => {
    const args = p.arguments as { ask?: boolean; say: string };
    if (!args.ask) return args.say;
    const o = await ask('Which?');
    return `${args.say} chose ${o.kind === 'answered' ? o.selected.join() : o.kind}`;
  });
  start('slow', { ask: true, say: 'slow' }, { acceptsQuestions: true });
  await until(() => stream.of('slow').some((m) => m.case === 'output' && m.value.msg.case === 'question'));
  for (let i = 0; i < 20; i++) start(`fast-${i}`, { say: `fast ${i}` });
  for (let i = 0; i < 20; i++) assert.equal(await stream.outcome(`fast-${i}`), `fast ${i}`);
  const q = stream.of('slow').find((m) => m.case === 'output' && m.value.msg.case === 'question');
  const questionId = q?.case === 'output' && q.value.msg.case === 'question' ? q.value.msg.value.id : '';
  stream.send({ callId: 'slow', input: { msg: { case: 'answer', value: { questionId, selected: [2] } } } });
  assert.equal(await stream.outcome('slow'), 'slow chose 2');
  for (let i = 0; i < 20; i++) assert.equal(stream.of(`fast-${i}`).length, 1);
  // A late message for a call that has ended is dropped; the id can be used again.
  stream.send({ callId: 'fast-0', input: { msg: { case: 'cancel', value: { reason: 'late' } } } });
  start('fast-0', { say: 'again' });
  await until(() => stream.of('fast-0').length === 2);
  assert.equal(await stream.outcome('fast-0'), 'again');
  // Half-closed with nothing in flight: the stream ends, with no status of its own.
  assert.equal(stream.writableEnded, false);
  stream.emit('end');
  assert.equal(stream.writableEnded, true);
  assert.equal(stream.failure, undefined);
  await close();
});

test("a call's failure is its own error; the stream and the other calls go on", async () => {
  const { stream, start, close } = await streamOn(async (p) => String((p.arguments as { say: string }).say));
  start('lost', {}, { runId: 'run-that-does-not-exist' });
  assert.match(await stream.outcome('lost'), /^error NOT_FOUND: /);
  start('bad-args', undefined);
  stream.send({ callId: 'not-start', input: { msg: { case: 'cancel', value: {} } } });
  start('fine', { say: 'still here' });
  assert.equal(await stream.outcome('fine'), 'still here');
  assert.equal(stream.failure, undefined);
  await close();
});

test('a cancel stops only its own call', async () => {
  let stopped = '';
  const { stream, start, close } = await streamOn(async (p, _ask, token) => {
    const args = p.arguments as { wait?: boolean; say: string };
    if (!args.wait) return args.say;
    await new Promise<void>((r) => token.onCancellationRequested(() => r()));
    stopped = args.say;
    return 'stopped';
  });
  start('long', { wait: true, say: 'long' });
  start('short', { say: 'short' });
  assert.equal(await stream.outcome('short'), 'short');
  stream.send({ callId: 'long', input: { msg: { case: 'cancel', value: { reason: 'enough' } } } });
  assert.equal(await stream.outcome('long'), 'stopped');
  assert.equal(stopped, 'long');
  await close();
});

test('a start whose id is in flight, a message without an id, or an id too long fails the stream', async () => {
  const { stream, start, close } = await streamOn(async (_p, _ask, token) => {
    await new Promise<void>((r) => token.onCancellationRequested(() => r()));
    return 'stopped';
  });
  start('same');
  start('same');
  assert.equal(stream.failure?.code, status.INVALID_ARGUMENT);
  assert.match(stream.failure?.message ?? '', /call same is already in flight/);
  const { stream: other, close: close2 } = await streamOn(async () => 'x');
  other.send({ callId: '', input: { msg: { case: 'cancel', value: {} } } });
  assert.equal(other.failure?.code, status.INVALID_ARGUMENT);
  const { stream: third, start: start3, close: close3 } = await streamOn(async () => 'x');
  start3('c'.repeat(129));
  assert.equal(third.failure?.code, status.INVALID_ARGUMENT);
  assert.match(third.failure?.message ?? '', /at most 128 characters/);
  await close();
  await close2();
  await close3();
});

test("each start spends one of the tenant's CallTool tokens; a refused call says when to retry", async () => {
  const { stream, start, close } = await streamOn(async () => 'ran', 2);
  for (const id of ['a', 'b', 'c']) start(id);
  const outcomes = await Promise.all(['a', 'b', 'c'].map((id) => stream.outcome(id)));
  assert.deepEqual(outcomes.slice(0, 2), ['ran', 'ran']);
  assert.match(outcomes[2], /^error RESOURCE_EXHAUSTED: /);
  const refused = stream.of('c')[0];
  assert.ok(refused.case === 'error' && refused.value.retryAfterMs > 0);
  await close();
});

test('at shutdown, calls in flight finish, new ones are refused, and the stream ends', async () => {
  let release: (() => void) | undefined;
  const { stream, start, drain, close } = await streamOn(async (p) => {
    if ((p.arguments as { wait?: boolean }).wait) await new Promise<void>((r) => (release = r));
    return 'done';
  });
  start('busy', { wait: true });
  await until(() => release !== undefined);
  drain.drain();
  start('late');
  assert.match(await stream.outcome('late'), /^error UNAVAILABLE: the gateway is shutting down/);
  assert.equal(stream.writableEnded, false);
  release?.();
  assert.equal(await stream.outcome('busy'), 'done');
  assert.equal(stream.writableEnded, true);
  // A stream that opens while the gateway drains ends as soon as it has nothing in flight.
  const late = new FakeStream();
  const other = (await streamOn(async () => 'x')).runs;
  serveCalls(
    late as unknown as ServerDuplexStream<CallsInput, CallsOutput>,
    'alice',
    () => undefined,
    { runs: other.registry, tenancy: other.tenancy, invoker: new ToolInvoker(), questionTimeoutSeconds: 5 },
    drain,
  );
  await until(() => late.writableEnded);
  await close();
});
