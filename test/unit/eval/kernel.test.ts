import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import * as os from 'node:os';
import type { ToolResult } from '../../../protocol/src/tools';
import type { ToolContext } from '../../../runner/src/tool';
import { cellResult } from '../../../runner/src/tools/eval/evalTool';
import type { Language } from '../../../runner/src/tools/eval/kernel';
import { KernelManager } from '../../../runner/src/tools/eval/kernelManager';
import { runCell } from '../../../runner/src/tools/eval/runCell';
import { DEFAULT_SETTINGS } from '../../../runner/src/tools/eval/schemas';

/** The kernels and the cell runner against real python3 and node processes, without a gateway. */
const kernels = new KernelManager({ ...DEFAULT_SETTINGS, interruptGraceSeconds: 1 }, os.tmpdir());
after(() => kernels.stopAll());

function context(
  signal = new AbortController().signal,
  callTool?: ToolContext['callTool'],
): ToolContext & { progressed: string[] } {
  const progressed: string[] = [];
  return {
    callId: 'c',
    surface: { maxTier: 'exec' },
    signal,
    progress: (t) => void progressed.push(t),
    ask: async () => ({ kind: 'skipped' }),
    callTool: callTool ?? (async (): Promise<ToolResult> => ({ content: [{ type: 'text', text: 'ok' }] })),
    progressed,
  };
}

async function run(language: Language, code: string, ctx = context(), budgetMs = 10_000) {
  const kernel = await kernels.kernel(language, false);
  const cell = await runCell(kernel, code, ctx, {
    budgetMs,
    graceMs: 1000,
    progressChars: 1000,
    output: { headChars: 2000, tailChars: 200, maxItems: 10, imageChars: 1e6 },
  });
  const result = cellResult(language, cell, kernel.executionCount, 0);
  return { cell, result, text: result.content.map((c) => (c.type === 'text' ? c.text : `<${c.type}>`)).join('') };
}

test('a cell that ignores the interrupt is killed, and the result says the state is lost', async () => {
  await run('python', 'kept = 1');
  const r = await run(
    'python',
    'import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass',
    context(),
    300,
  );
  assert.equal(r.cell.killed, true);
  assert.equal(r.result.isError, true);
  assert.match(
    r.text,
    /did not stop after an interrupt \(the cell produced no output for 0\.3 s.*\), so the Python interpreter was killed: it has been reset and its state .* is lost/,
  );
  assert.match((await run('python', '"kept" in globals()')).text, /^False$/);
});

test('cancelling the call interrupts the cell; the interpreter keeps its state', async () => {
  await run('python', 'kept = 2');
  const abort = new AbortController();
  setTimeout(() => abort.abort('the client went away'), 300);
  const r = await run('python', 'import time\ntime.sleep(30)', context(abort.signal));
  assert.equal(r.cell.killed, false);
  assert.match(
    r.text,
    /KeyboardInterrupt\nThe cell was interrupted because the call was cancelled \(the client went away\)/,
  );
  assert.equal((await run('python', 'kept')).text, '2');
});

test('printed text streams out as progress while the cell runs, and output resets the budget', async () => {
  const ctx = context();
  const r = await run(
    'python',
    'import time\nfor i in range(4):\n    print("tick", i, flush=True)\n    time.sleep(0.2)',
    ctx,
    500,
  );
  assert.ok(!r.result.isError, r.text);
  assert.equal(r.text, 'tick 0\ntick 1\ntick 2\ntick 3\n');
  assert.ok(ctx.progressed.length >= 2, `progress came in ${ctx.progressed.length} pieces`);
});

test('output of child processes written straight to fd 1 is part of the result', async () => {
  const r = await run('python', 'import subprocess\nsubprocess.run(["echo", "from a child"])\nNone');
  assert.match(r.text, /from a child/);
});

test("a failing bridged call raises ToolError in the cell with the tool's message", async () => {
  const ctx = context(undefined, async (name) => ({
    content: [{ type: 'text', text: `unknown tool: ${name}` }],
    isError: true,
  }));
  const py = await run('python', 'try:\n    tool("nope", {})\nexcept ToolError as e:\n    print("caught", e)', ctx);
  assert.equal(py.text, 'caught unknown tool: nope\n');
  const js = await run(
    'javascript',
    'try { await tool("nope", {}) } catch (e) { console.log(e.name, e.message) }',
    ctx,
  );
  assert.equal(js.text, 'ToolError unknown tool: nope\n');
});

test('the JavaScript kernel echoes, streams console output and keeps globals', async () => {
  const a = await run('javascript', 'const list = [1, 2, 3]\nconsole.log("sum")\nlist.reduce((x, y) => x + y)');
  assert.equal(a.text, 'sum\n6');
  assert.equal((await run('javascript', 'list.length')).text, '3');
});

test('a missing interpreter is a clear start error, not a hang', async () => {
  const broken = new KernelManager({ ...DEFAULT_SETTINGS, python: '/nonexistent/python3' }, os.tmpdir());
  await assert.rejects(broken.kernel('python', false), /could not start the python kernel \(\/nonexistent\/python3\)/);
});

test('when an interpreter goes, the processes its cells started go with it', async () => {
  const r = await run('python', 'import subprocess\nchild = subprocess.Popen(["sleep", "300"])\nchild.pid');
  const pid = Number(r.text);
  assert.ok(pid > 0, r.text);
  const gone = await run('python', 'import os\nos._exit(3)');
  assert.equal(gone.result.isError, true);
  await new Promise((res) => setTimeout(res, 200));
  // Gone, or a zombie waiting for an init that reaps slowly: either way no longer running.
  const state = existsSync(`/proc/${pid}/stat`)
    ? readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0]
    : 'gone';
  assert.ok(state === 'gone' || state === 'Z', `sleep is still ${state}`);
});

test('idioms are rewritten only in cells that need it, and tracebacks quote the cell as written', async () => {
  const valid = await run('python', 's = """\n!not a command\n%not a magic\n"""\ns.split()');
  assert.equal(valid.text, "['!not', 'a', 'command', '%not', 'a', 'magic']");
  const failing = await run('python', 'value = 1\n%cd /no/such/dir');
  assert.match(failing.text, /cell line 2, in <module>\n {4}%cd \/no\/such\/dir\nFileNotFoundError/);
});

test('the kernel lifecycle: a first start, a reset (requested) and a death (crash) are told apart', async () => {
  const own = new KernelManager(DEFAULT_SETTINGS, os.tmpdir());
  const heard: string[] = [];
  own.lifecycle = {
    started: (name, restart) => void heard.push(`start ${name}${restart ? ` ${restart}` : ''}`),
    stopped: (name) => void heard.push(`stop ${name}`),
  };
  const first = await own.kernel('javascript', false);
  const reset = await own.kernel('javascript', true);
  await first.exited;
  reset.kill();
  await reset.exited;
  const third = await own.kernel('javascript', false);
  await own.stopAll();
  await third.exited;
  // A replaced kernel's exit may be read before or after its successor is up.
  assert.deepEqual(
    heard.filter((h) => h.startsWith('start')),
    ['start javascript', 'start javascript request', 'start javascript crash'],
  );
  assert.equal(heard.filter((h) => h === 'stop javascript').length, 3);
});
