import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { create } from '@bufbuild/protobuf';
import { Metadata, status, type ClientDuplexStream, type ServiceError } from '@grpc/grpc-js';
import { Approval, CallToolInputSchema, type CallToolOutput } from '@tether/contract';
import { resultText, TetherClient } from '../../clients/typescript/src';
import { startTestGateway, TOKENS, type TestGateway } from '../helpers/gateway';
import { sampleOf, startOtlpReceiver } from '../helpers/otlp';
import { debugRun, fixture as debugFixture } from '../integration/debug/helpers';
import { fixture } from '../integration/lsp/helpers';

let t: TestGateway;
let otlp: Awaited<ReturnType<typeof startOtlpReceiver>>;
const auditPath = path.join(mkdtempSync(path.join(os.tmpdir(), 'tether-audit-')), 'audit.jsonl');

before(async () => {
  otlp = await startOtlpReceiver();
  t = await startTestGateway({
    metrics: { listen: '127.0.0.1:0' },
    audit: { path: auditPath },
    tracing: { otlpEndpoint: otlp.url, serviceName: 'tether-test' },
  });
});
after(async () => {
  await t?.close();
  await otlp?.close();
});

const scrape = async () => (await fetch(`http://${t.gateway.metricsAddress}/metrics`)).text();
const audit = () =>
  readFileSync(auditPath, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, unknown>);

test('/metrics: every outcome of a scripted session moves its series; the audit log records the same session', async (ctx) => {
  const before = await scrape();
  const auditBefore = audit().length;
  const run = await t.alice.createRun({
    approvals: { write: Approval.PROMPT, exec: Approval.AUTO },
    features: { eval: true, questions: { enabled: true, targetSpace: 'space-1' } },
  });
  assert.equal(run.error, '');
  const runId = run.runId;
  if (!(await t.alice.listTools(runId)).some((x) => x.name === 'eval')) return ctx.skip('this build has no eval tool');

  // ok (after an approved PERMISSION card), is_error, denied, answered ASK card.
  const wrote = await t.alice.callTool(
    runId,
    'write',
    { path: 'a.txt', content: 'secret-file-content' },
    { onApproval: () => true },
  );
  assert.ok(!wrote.result.isError, resultText(wrote.result));
  assert.ok(!(await t.alice.callTool(runId, 'read', { path: 'a.txt' })).result.isError);
  assert.ok((await t.alice.callTool(runId, 'read', { path: 'missing.txt' })).result.isError);
  const denied = await t.alice.callTool(runId, 'write', { path: 'b.txt', content: 'x' }, { onApproval: () => false });
  assert.ok(denied.result.isError);
  const asked = await t.alice.callTool(
    runId,
    'ask_user',
    { question: 'Which?', options: [{ label: 'A' }, { label: 'B' }] },
    { onQuestion: () => ({ selected: [2] }) },
  );
  assert.ok(!asked.result.isError, resultText(asked.result));
  // NOT_FOUND: a tool the run does not have (its name must not become a label).
  const missing = (await t.alice.callTool(runId, 'made_up_tool_x1', {}).catch((e: ServiceError) => e)) as ServiceError;
  assert.equal(missing.code, status.NOT_FOUND);
  // UNAUTHENTICATED, three times: a unary call, a call on the shared Calls stream, a CallTool.
  const stranger = t.client('token-nobody-has');
  assert.equal(
    ((await stranger.listRuns().catch((e: ServiceError) => e)) as ServiceError).code,
    status.UNAUTHENTICATED,
  );
  assert.equal(
    ((await stranger.callTool(runId, 'read', { path: 'a.txt' }).catch((e: ServiceError) => e)) as ServiceError).code,
    status.UNAUTHENTICATED,
  );
  const strangerOwnStreams = new TetherClient(t.gateway.address, 'token-nobody-has', { multiplex: false });
  assert.equal(
    (
      (await strangerOwnStreams
        .callTool(runId, 'read', { path: 'a.txt' })
        .catch((e: ServiceError) => e)) as ServiceError
    ).code,
    status.UNAUTHENTICATED,
  );
  strangerOwnStreams.close();
  // a bridged call, answered by the client
  const bridged = await t.alice.callTool(
    runId,
    'eval',
    { code: 'print(tool("client_side_tool", {"n": 1}))', description: 'call a tool the client owns' },
    { onBridgeCall: () => 'from the client' },
  );
  assert.match(resultText(bridged.result), /from the client/);
  // cancelled
  const abort = new AbortController();
  setTimeout(() => abort.abort('enough'), 700);
  const cancelled = await t.alice.callTool(
    runId,
    'eval',
    { code: 'import time\ntime.sleep(30)', description: 'sleep long enough to be cancelled' },
    { signal: abort.signal },
  );
  assert.ok(cancelled.result.isError);
  await t.alice.deleteRun(runId);

  const now = await scrape();
  const moved = (name: string, labels: Record<string, string> = {}) =>
    sampleOf(now, name, labels) - sampleOf(before, name, labels);
  assert.equal(moved('tether_calls_total', { tool: 'write', tier: 'write', outcome: 'ok' }), 1);
  assert.equal(moved('tether_calls_total', { tool: 'write', tier: 'write', outcome: 'is_error' }), 1);
  assert.equal(moved('tether_calls_total', { tool: 'read', tier: 'read', outcome: 'ok' }), 1);
  assert.equal(moved('tether_calls_total', { tool: 'read', tier: 'read', outcome: 'is_error' }), 1);
  assert.equal(moved('tether_calls_total', { tool: 'ask_user', outcome: 'ok' }), 1);
  assert.equal(moved('tether_calls_total', { tool: 'unknown', tier: 'unknown', outcome: 'NOT_FOUND' }), 1);
  assert.equal(moved('tether_calls_total', { tool: 'eval', tier: 'exec', outcome: 'ok' }), 1);
  assert.equal(moved('tether_calls_total', { tool: 'eval', tier: 'exec', outcome: 'cancelled' }), 1);
  assert.equal(moved('tether_call_duration_seconds_count', { tool: 'read' }), 2);
  assert.ok(
    moved('tether_call_duration_seconds_sum', { tool: 'eval', outcome: 'cancelled' }) >= 0.5,
    'the cancelled call lasted until the cancel',
  );
  assert.equal(sampleOf(now, 'tether_calls_in_flight'), 0);
  assert.equal(moved('tether_questions_total', { kind: 'permission', answer: 'approved' }), 1);
  assert.equal(moved('tether_questions_total', { kind: 'permission', answer: 'denied' }), 1);
  assert.equal(moved('tether_questions_total', { kind: 'ask', answer: 'answered' }), 1);
  assert.equal(moved('tether_approvals_total', { tier: 'write', decision: 'approved' }), 1);
  assert.equal(moved('tether_approvals_total', { tier: 'write', decision: 'denied' }), 1);
  assert.equal(moved('tether_approvals_total', { tier: 'exec', decision: 'auto' }), 2);
  assert.equal(moved('tether_bridged_calls_total', { target: 'client', outcome: 'ok' }), 1);
  assert.equal(moved('tether_auth_failures_total', { method: 'ListRuns' }), 1);
  assert.equal(moved('tether_auth_failures_total', { method: 'Calls' }), 1);
  assert.equal(moved('tether_auth_failures_total', { method: 'CallTool' }), 1);
  assert.equal(moved('tether_grpc_requests_total', { method: 'ListRuns', code: 'UNAUTHENTICATED' }), 1);
  assert.equal(moved('tether_runs_created_total', { tenant: 'alice' }), 1);
  assert.equal(moved('tether_runs_deleted_total', { tenant: 'alice' }), 1);
  assert.equal(moved('tether_create_run_duration_seconds_count', { start: 'cold', outcome: 'ready' }), 1);
  assert.equal(moved('tether_run_lifetime_seconds_count', { tenant: 'alice' }), 1);
  assert.ok(
    !now.includes('made_up_tool_x1') && !now.includes(runId),
    'no tool name from the client and no run id is a label',
  );

  // The audit log: the same session, in order, with sizes and keys but no values.
  const records = audit().slice(auditBefore);
  const mine = records.filter((r) => r.runId === runId || r.event === 'auth.failed');
  const shape = mine.map((r) =>
    r.event === 'tool.call'
      ? `tool.call ${r.tool} ${r.outcome} ${r.approval}`
      : r.event === 'question'
        ? `question ${r.kind} ${r.answer}`
        : r.event === 'tool.bridged'
          ? `tool.bridged ${r.tool} ${r.target}`
          : String(r.event),
  );
  assert.deepEqual(shape, [
    'run.created',
    'question permission approved',
    'tool.call write ok approved',
    'tool.call read ok not_required',
    'tool.call read is_error not_required',
    'question permission denied',
    'tool.call write is_error denied',
    'question ask answered',
    'tool.call ask_user ok not_required',
    'tool.call made_up_tool_x1 NOT_FOUND not_required',
    'auth.failed',
    'auth.failed',
    'auth.failed',
    'tool.bridged client_side_tool client',
    'tool.call eval ok auto',
    'tool.call eval cancelled auto',
    'run.deleted',
  ]);
  const firstWrite = mine.find((r) => r.event === 'tool.call' && r.tool === 'write')!;
  assert.deepEqual(firstWrite.arguments, {
    keys: ['path', 'content'],
    bytes: Buffer.byteLength(JSON.stringify({ path: 'a.txt', content: 'secret-file-content' })),
  });
  assert.equal(firstWrite.tenant, 'alice');
  assert.equal(firstWrite.tier, 'write');
  assert.equal(firstWrite.surface, 'unspecified/unspecified');
  const created = mine[0];
  assert.deepEqual(created.limits, { memoryMb: 2048, cpuMillis: 2000, pids: 512 });
  assert.deepEqual(created.features, ['eval', 'questions']);
  assert.deepEqual(
    mine.filter((r) => r.event === 'auth.failed').map((r) => [r.method, r.reason]),
    [
      ['ListRuns', 'invalid'],
      ['Calls', 'invalid'],
      ['CallTool', 'invalid'],
    ],
  );

  const everything = `${now}\n${readFileSync(auditPath, 'utf8')}`;
  assert.ok(!everything.includes('secret-file-content'), 'no file content in the audit log');
  for (const token of [...Object.keys(TOKENS), 'token-nobody-has'])
    assert.ok(!everything.includes(token), `${token} appears in an output`);
});

/** One CallTool sent with a W3C traceparent in its metadata, run to its end. */
async function tracedCall(
  runId: string,
  tool: string,
  args: Record<string, unknown>,
  traceId: string,
  clientSpan: string,
): Promise<void> {
  const md = new Metadata();
  md.set('authorization', 'Bearer token-alice');
  md.set('traceparent', `00-${traceId}-${clientSpan}-01`);
  const call = t.alice.raw.callTool(md) as ClientDuplexStream<unknown, CallToolOutput>;
  const done = new Promise<void>((resolve, reject) => {
    call.on('data', () => undefined);
    call.on('end', resolve);
    call.on('error', reject);
  });
  call.write(
    create(CallToolInputSchema, {
      msg: {
        case: 'start',
        value: { runId, tool, argumentsJson: JSON.stringify(args) },
      },
    }),
  );
  call.end();
  await done;
  await t.gateway.telemetry.tracer!.flush();
}

test('a CallTool carrying a traceparent: one span tree under the client trace, exported over OTLP', async () => {
  const run = await t.alice.createRun({ approvals: { write: Approval.AUTO } });
  const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
  const clientSpan = '00f067aa0ba902b7';
  await tracedCall(run.runId, 'write', { path: 't.txt', content: 'x' }, traceId, clientSpan);
  const spans = otlp.spans.filter((s) => s.traceId === traceId);
  const root = spans.find((s) => s.name === 'CallTool');
  assert.ok(root, `a CallTool span in ${JSON.stringify(otlp.spans.map((s) => s.name))}`);
  assert.equal(root.parentSpanId, clientSpan);
  assert.equal(root.service, 'tether-test');
  assert.equal(root.attributes['tether.tool'], 'write');
  assert.equal(root.attributes['tether.outcome'], 'ok');
  const children = spans.filter((s) => s.parentSpanId === root.spanId).map((s) => s.name);
  assert.deepEqual(children, ['validate', 'approval', 'runner']);
  await t.alice.deleteRun(run.runId);
});

test('a call on the shared Calls stream carrying a traceparent: its span tree is under the client trace', async () => {
  const run = await t.alice.createRun({});
  const traceId = '5cf92f3577b34da6a3ce929d0e0e4737';
  const clientSpan = '01f067aa0ba902b8';
  await t.alice.putFileMap(run.runId, { 't.txt': 'x\n' });
  const out = await t.alice.callTool(
    run.runId,
    'read',
    { path: 't.txt' },
    { traceparent: `00-${traceId}-${clientSpan}-01` },
  );
  assert.equal(out.isError, false, out.text);
  await t.gateway.telemetry.tracer!.flush();
  const spans = otlp.spans.filter((s) => s.traceId === traceId);
  const root = spans.find((s) => s.name === 'CallTool');
  assert.ok(root, `a call span in ${JSON.stringify(spans.map((s) => s.name))}`);
  assert.equal(root.parentSpanId, clientSpan);
  assert.equal(root.attributes['tether.tool'], 'read');
  assert.deepEqual(
    spans.filter((s) => s.parentSpanId === root.spanId).map((s) => s.name),
    ['validate', 'runner'],
  );
  await t.alice.deleteRun(run.runId);
});

test('a traced lsp call: the runner phases (server start, the LSP request) are children of the runner span', async () => {
  const run = await t.alice.createRun({ features: { lsp: true } });
  assert.equal(run.error, '');
  await t.alice.putFileMap(run.runId, fixture('py'));
  const traceId = '0af7651916cd43dd8448eb211c80319c';
  const clientSpan = 'b7ad6b7169203331';
  await tracedCall(
    run.runId,
    'lsp',
    { action: 'hover', file: 'geometry/main.py', line: 4, symbol: 'total_area' },
    traceId,
    clientSpan,
  );
  const spans = otlp.spans.filter((s) => s.traceId === traceId);
  const root = spans.find((s) => s.name === 'CallTool');
  assert.ok(root, `a CallTool span in ${JSON.stringify(spans.map((s) => s.name))}`);
  assert.equal(root.parentSpanId, clientSpan);
  assert.equal(root.attributes['tether.outcome'], 'ok');
  const children = spans.filter((s) => s.parentSpanId === root.spanId);
  assert.deepEqual(
    children.map((s) => s.name),
    ['validate', 'runner'],
    'a read tool has no approval phase',
  );
  const runner = children.find((s) => s.name === 'runner')!;
  const phases = spans.filter((s) => s.parentSpanId === runner.spanId);
  const names = phases.map((s) => s.name);
  assert.ok(names.includes('lsp.start'), `lsp.start in ${names}`);
  const hover = phases.find((s) => s.name === 'lsp.request' && s.attributes['lsp.method'] === 'textDocument/hover');
  assert.ok(hover, `a hover request in ${JSON.stringify(phases.map((s) => [s.name, s.attributes]))}`);
  assert.equal(hover.attributes['tether.side'], 'runner');
  assert.equal(phases.find((s) => s.name === 'lsp.start')?.attributes['lsp.server'], 'pyright');
  // Placed by offsets under the runner span: inside it, give or take the transit of the call.
  for (const p of phases) {
    assert.ok(p.startMs >= runner.startMs - 1 && p.endMs <= runner.endMs + 1, `${p.name} outside the runner span`);
    assert.ok(p.endMs >= p.startMs);
  }
  await t.alice.deleteRun(run.runId);
});

test('a traced eval call: the kernel start and the cell are runner phases under the runner span', async () => {
  const run = await t.alice.createRun({ features: { eval: true }, approvals: { exec: Approval.AUTO } });
  assert.equal(run.error, '');
  const traceId = '5b8efff798038103d269b633813fc60c';
  await tracedCall(
    run.runId,
    'eval',
    { code: '6 * 7', description: 'a cell for the tracing test here' },
    traceId,
    'eee19b7ec3c1b174',
  );
  const spans = otlp.spans.filter((s) => s.traceId === traceId);
  const root = spans.find((s) => s.name === 'CallTool');
  assert.equal(root?.attributes['tether.outcome'], 'ok');
  const children = spans.filter((s) => s.parentSpanId === root!.spanId).map((s) => s.name);
  assert.deepEqual(children, ['validate', 'approval', 'runner']);
  const runner = spans.find((s) => s.parentSpanId === root!.spanId && s.name === 'runner')!;
  const phases = spans.filter((s) => s.parentSpanId === runner.spanId);
  assert.deepEqual(phases.map((s) => [s.name, s.attributes['eval.language']]).sort(), [
    ['eval.cell', 'python'],
    ['eval.kernel_start', 'python'],
  ]);
  await t.alice.deleteRun(run.runId);
});

test('a traced debug launch: the debug op and its adapter requests are runner phases', async () => {
  const d = await debugRun(t, 'conv-traced-debug', debugFixture('python'));
  await d.ok({ op: 'breakpoints', file: 'app.py', lines: [12] });
  const traceId = '8d3f0c6c2b1e4a5f9e7d6c5b4a392817';
  await tracedCall(d.runId, 'debug', { op: 'launch', program: 'app.py' }, traceId, '1f2e3d4c5b6a7988');
  const spans = otlp.spans.filter((s) => s.traceId === traceId);
  const root = spans.find((s) => s.name === 'CallTool');
  assert.equal(root?.attributes['tether.outcome'], 'ok');
  const runner = spans.find((s) => s.parentSpanId === root!.spanId && s.name === 'runner')!;
  const phases = spans.filter((s) => s.parentSpanId === runner.spanId);
  assert.equal(phases.find((s) => s.name === 'debug.launch')?.attributes['debug.op'], 'launch');
  const commands = phases.filter((s) => s.name === 'dap.request').map((s) => s.attributes['dap.command']);
  for (const c of ['initialize', 'launch', 'configurationDone']) assert.ok(commands.includes(c), `${c} in ${commands}`);
  await t.alice.deleteRun(d.runId);
});

test('a token never reaches the log, the metrics or the audit log of a served gateway (debug logging)', async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-tokens-'));
  const secret = 'tok-d41d8cd98f00b204e980';
  const wrong = 'tok-wrong-5f4dcc3b5aa765d6';
  const child = spawn(process.execPath, [path.resolve(__dirname, '../../gateway/src/cli.js'), 'serve'], {
    env: {
      ...process.env,
      TETHER_LOG_LEVEL: 'debug',
      TETHER_TOKENS: `${secret}=carol`,
      TETHER_PROVIDER: 'process',
      TETHER_ALLOW_PROCESS_PROVIDER: '1',
      TETHER_LISTEN: '127.0.0.1:0',
      TETHER_HTTP_LISTEN: 'off',
      TETHER_METRICS_LISTEN: '127.0.0.1:0',
      TETHER_AUDIT_LOG: path.join(dir, 'audit.jsonl'),
      TETHER_STATE_DIR: dir,
      TETHER_INSTANCE: `tokens-${process.pid}`,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  try {
    const addresses = await new Promise<{ grpc: string; metrics: string }>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the gateway did not start:\n${out}`)), 20_000);
      const check = () => {
        const grpc = /"address":"([^"]+)"[^\n]*tether gateway serving/.exec(out)?.[1];
        const metrics = /"address":"([^"]+)"[^\n]*metrics served/.exec(out)?.[1];
        if (grpc && metrics) {
          clearTimeout(timer);
          resolve({ grpc, metrics });
        }
      };
      child.stdout.on('data', check);
    });
    const carol = new TetherClient(addresses.grpc, secret);
    const intruder = new TetherClient(addresses.grpc, wrong);
    const run = await carol.createRun({});
    await carol.callTool(run.runId, 'write', { path: 'x.txt', content: 'y' }).catch(() => undefined);
    await carol.callTool(run.runId, 'read', { path: 'x.txt' });
    await intruder.listRuns().catch(() => undefined);
    await intruder.callTool(run.runId, 'read', { path: 'x.txt' }).catch(() => undefined);
    await carol.deleteRun(run.runId);
    carol.close();
    intruder.close();
    const metrics = await (await fetch(`http://${addresses.metrics}/metrics`)).text();
    const auditText = readFileSync(path.join(dir, 'audit.jsonl'), 'utf8');
    assert.match(auditText, /"event":"auth.failed"/);
    assert.match(out, /"level":20/, 'debug lines were logged');
    for (const [where, text] of [
      ['log', out],
      ['metrics', metrics],
      ['audit', auditText],
    ]) {
      assert.ok(!text.includes(secret) && !text.includes(wrong), `a token appears in the ${where}`);
      assert.ok(
        !text.includes(secret.slice(4, 14)) && !text.includes(wrong.slice(4, 14)),
        `part of a token appears in the ${where}`,
      );
    }
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
  }
});
