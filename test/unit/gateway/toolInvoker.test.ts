import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { CallPort, PermissionOutcome } from '../../../gateway/src/calls/CallPort';
import { ToolAbsentError, ToolInvoker, type Caller } from '../../../gateway/src/calls/ToolInvoker';
import type { ObservedCall } from '../../../gateway/src/observability/Telemetry';
import type { CallHooks } from '../../../gateway/src/runs/RunnerClient';
import type { ReadyRun } from '../../../gateway/src/runs/RunRecord';
import type { Tier, ToolResult } from '../../../protocol/src/tools';
import { ArgumentValidator } from '../../../gateway/src/validation';
import { TOOLS, runSpec } from './fakeSandbox';

const text = (r: ToolResult) => r.content.map((c) => (c.type === 'text' ? c.text : '')).join('');

/** A ready run whose runner answers every tool with `runner`, and records what reached it. */
function runOf(runner: (tool: string, hooks: CallHooks) => Promise<ToolResult>) {
  const ran: string[] = [];
  const spec = runSpec();
  spec.approvals = { write: 'PROMPT', exec: 'PROMPT' };
  const run = {
    runId: 'run-1',
    tenant: 'alice',
    spec,
    tools: TOOLS,
    validator: new ArgumentValidator(TOOLS),
    tool: (name: string) => TOOLS.find((t) => t.name === name),
    runner: {
      callTool: (tool: string, _args: unknown, _surface: unknown, hooks: CallHooks) => {
        ran.push(tool);
        return runner(tool, hooks);
      },
    },
  } as unknown as ReadyRun;
  return { run, ran };
}

/** A caller whose port approves every prompt and records what the call reported. */
function callerOf(cap: Tier, port: Partial<CallPort> = {}) {
  const prompts: string[] = [];
  const reported: string[] = [];
  const full: CallPort = {
    signal: new AbortController().signal,
    acceptsQuestions: true,
    acceptsBridgeCalls: false,
    progress: () => undefined,
    ask: async () => ({ kind: 'skipped' }),
    askPermission: async (question): Promise<PermissionOutcome> => {
      prompts.push(question);
      return { kind: 'approved' };
    },
    bridgeToClient: async (tool) => ({ content: [{ type: 'text', text: `client ran ${tool}` }] }),
    during: (work) => work(),
    ...port,
  };
  const observed = {
    resolved: (tier: Tier, args: object) => reported.push(`resolved ${tier} ${JSON.stringify(args)}`),
    phase: () => undefined,
    approvalDecided: (_tier: Tier, decision: string, topLevel: boolean) =>
      reported.push(`approval ${decision}${topLevel ? '' : ' (bridged)'}`),
    question: (kind: string, answer: string) => reported.push(`question ${kind} ${answer}`),
    bridgedCall: (tool: string, target: string) => reported.push(`bridged ${tool} to ${target}`),
  } as unknown as ObservedCall;
  const caller: Caller = { cap, port: full, observed };
  return { caller, prompts, reported };
}

test("a model's call: absent from the surface is ToolAbsentError, bad JSON an is_error result, both before the runner", async () => {
  const { run, ran } = runOf(async () => ({ content: [{ type: 'text', text: 'ran' }] }));
  const invoker = new ToolInvoker();
  const read = callerOf('read');
  await assert.rejects(invoker.invoke(run, 'write', '{}', read.caller), ToolAbsentError);
  await assert.rejects(invoker.invoke(run, 'nope', '{}', read.caller), /unknown tool: nope/);
  assert.deepEqual(read.reported, []);

  const exec = callerOf('exec');
  const bad = await invoker.invoke(run, 'echo', '{not json', exec.caller);
  assert.equal(bad.isError, true);
  assert.match(text(bad), /arguments_json is not valid JSON/);
  assert.deepEqual(exec.reported, ['resolved read {}']);
  assert.deepEqual(ran, []);

  const ok = await invoker.invoke(run, 'write', '{"path":"a"}', exec.caller);
  assert.equal(text(ok), 'ran');
  assert.deepEqual(exec.prompts, ['Allow write (write tier)?']);
  assert.deepEqual(exec.reported, [
    'resolved read {}',
    'resolved write {"path":"a"}',
    'question permission approved',
    'approval approved',
  ]);
  assert.deepEqual(ran, ['write']);
});

test('a bridged call goes through the same gate once: a tool above the cap is "unknown tool", never the client\'s', async () => {
  const bridged: ToolResult[] = [];
  // Only the model's own call bridges: the calls it bridges just run.
  let outer = true;
  const { run, ran } = runOf(async (tool, hooks) => {
    if (outer) {
      outer = false;
      for (const name of ['write', 'client_search', 'echo']) bridged.push(await hooks.bridge(name, {}));
    }
    return { content: [{ type: 'text', text: `${tool} ran` }] };
  });
  const invoker = new ToolInvoker();
  const read = callerOf('read', { acceptsBridgeCalls: true });
  const result = await invoker.invoke(run, 'echo', '', read.caller);
  assert.equal(text(result), 'echo ran');
  assert.deepEqual(bridged.map(text), ['unknown tool: write', 'client ran client_search', 'echo ran']);
  assert.deepEqual(ran, ['echo', 'echo']);
  assert.deepEqual(read.prompts, []);
  assert.deepEqual(read.reported, [
    'resolved read {}',
    'approval not_required',
    'bridged write to gateway',
    'bridged client_search to client',
    'approval not_required (bridged)',
    'bridged echo to gateway',
  ]);

  // With a write cap the same bridged write asks once, on the caller's port.
  const write = callerOf('write');
  bridged.length = 0;
  outer = true;
  await invoker.invoke(run, 'echo', '', write.caller);
  assert.deepEqual(bridged.map(text), ['write ran', 'unknown tool: client_search', 'echo ran']);
  assert.deepEqual(write.prompts, ['Allow write (write tier)?']);
});
