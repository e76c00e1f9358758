import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { inflateSync } from 'node:zlib';
import { create } from '@bufbuild/protobuf';
import { status, type ServiceError } from '@grpc/grpc-js';
import { Approval, CallToolStartSchema, SurfaceMode, type ToolResult } from '@tether/contract';
import { resultText, type CallOptions } from '../../../clients/typescript/src';
import { ToolInvoker } from '../../../gateway/src/calls/ToolInvoker';
import type { CallSink } from '../../../gateway/src/grpc/callSink';
import { CallStream } from '../../../gateway/src/grpc/callStream';
import { Telemetry } from '../../../gateway/src/observability/Telemetry';
import type { ToolResult as RunnerResult } from '../../../protocol/src/tools';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';

/**
 * eval against the real interpreters of the runner image (python3 with pandas and matplotlib,
 * the runner's Node), through gRPC → gateway → runner → kernel. One run is shared by the cases.
 */
const docker = (process.env.TETHER_TEST_PROVIDER ?? 'process') === 'docker';

let t: TestGateway;
let runId: string;

before(async () => {
  t = await startTestGateway({
    // Off Docker (development), the host's Debian python3 carries pandas and matplotlib.
    runner: { eval: docker ? {} : { python: '/usr/bin/python3' } },
  });
  const run = await t.alice.createRun({ features: { eval: true }, approvals: { write: Approval.PROMPT } });
  assert.equal(run.error, '');
  runId = run.runId;
  await t.alice.putFileMap(runId, { 'notes/hello.txt': 'hello from the workspace\n' });
});

after(async () => {
  if (runId) await t.alice.deleteRun(runId).catch(() => undefined);
  await t?.close();
});

async function cell(code: string, extra: Record<string, unknown> = {}, opts: CallOptions = {}) {
  const out = await t.alice.callTool(
    runId,
    'eval',
    { code, description: 'run a cell for the test suite', ...extra },
    opts,
  );
  return { ...out, text: resultText(out.result), structured: JSON.parse(out.result.structuredJson || '{}') };
}

function images(r: ToolResult) {
  return r.content.flatMap((c) => (c.item.case === 'image' ? [c.item.value] : []));
}

/** Decodes a PNG far enough to prove it is one: signature, IHDR, and IDAT inflating to the right size. */
function decodePng(data: Uint8Array): { width: number; height: number } {
  const buf = Buffer.from(data);
  assert.deepEqual([...buf.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'PNG signature');
  assert.equal(buf.subarray(12, 16).toString('latin1'), 'IHDR');
  const width = buf.readUInt32BE(16);
  const height = buf.readUInt32BE(20);
  const [bitDepth, colorType] = [buf[24], buf[25]];
  const channels = { 0: 1, 2: 3, 4: 2, 6: 4 }[colorType as 0 | 2 | 4 | 6];
  assert.ok(channels && bitDepth === 8, `8-bit PNG (depth ${bitDepth}, color type ${colorType})`);
  const idat: Buffer[] = [];
  for (let at = 8; at < buf.length; ) {
    const len = buf.readUInt32BE(at);
    const type = buf.subarray(at + 4, at + 8).toString('latin1');
    if (type === 'IDAT') idat.push(buf.subarray(at + 8, at + 8 + len));
    at += 12 + len;
  }
  assert.equal(inflateSync(Buffer.concat(idat)).length, height * (1 + width * channels!));
  return { width, height };
}

describe('python', () => {
  test('state persists across cells; the last expression is echoed; an error keeps the state', async () => {
    const a = await cell('import math\nx = 20\nprint("set x")\nx + 1');
    assert.ok(!a.result.isError, a.text);
    assert.equal(a.text, 'set x\n\n21');
    const b = await cell('def f():\n    return 1 / 0\ny = 5\nf()');
    assert.equal(b.result.isError, true);
    assert.match(
      b.text,
      /cell line 4, in <module>\n {4}f\(\)\n {2}cell line 2, in f\n {4}return 1 \/ 0\nZeroDivisionError: division by zero/,
    );
    assert.equal(b.structured.error.type, 'ZeroDivisionError');
    const c = await cell('x + y, math.pi > 3');
    assert.equal(c.text, '(25, True)');
    const quiet = await cell('x;');
    assert.equal(quiet.text, '(no output)');
  });

  test('description must be 5-10 words', async () => {
    const r = await t.alice.callTool(runId, 'eval', { code: '1', description: 'too short' });
    assert.equal(r.result.isError, true);
    assert.match(resultText(r.result), /invalid arguments for eval[\s\S]*description/);
  });

  test('a DataFrame becomes a capped table; a figure a PNG, also when left open', async () => {
    const r = await cell(
      'import pandas as pd\nimport matplotlib.pyplot as plt\n' +
        'df = pd.DataFrame({"n": range(120), "sq": [i * i for i in range(120)]})\n' +
        'fig, ax = plt.subplots(figsize=(4, 3), dpi=100)\nax.plot(df.n, df.sq)\n' +
        'plt.figure(figsize=(2, 2), dpi=50)\nplt.plot([3, 1, 2])\n' +
        'display(df.head(3))\ndf',
    );
    assert.ok(!r.result.isError, r.text);
    const tables = r.result.content.flatMap((c) => (c.item.case === 'table' ? [c.item.value] : []));
    assert.equal(tables.length, 2);
    assert.deepEqual(tables[0].columns, ['', 'n', 'sq']);
    assert.deepEqual(
      tables[0].rows.map((row) => row.cells),
      [
        ['0', '0', '0'],
        ['1', '1', '1'],
        ['2', '2', '4'],
      ],
    );
    assert.equal(tables[0].omittedRows, 0);
    assert.equal(tables[1].rows.length, 50);
    assert.equal(tables[1].omittedRows, 70);
    const pngs = images(r.result);
    assert.equal(pngs.length, 2, 'both open figures are shown');
    assert.ok(pngs.every((p) => p.mime === 'image/png'));
    const big = decodePng(pngs[0].data);
    const small = decodePng(pngs[1].data);
    assert.ok(big.width > 200 && big.width <= 400 && big.height > 150 && big.height <= 300, JSON.stringify(big));
    assert.ok(small.width > 50 && small.width <= 130 && small.height <= 130, JSON.stringify(small));
    // Shown figures are closed, as an inline backend does.
    assert.equal((await cell('len(plt.get_fignums())')).text, '0');
  });

  test('IPython idioms: !cmd, %%bash, %cd, %env, %time, %%timeit', async () => {
    const shell = await cell('!echo shell says hi\nlisting = !ls notes\nlisting');
    assert.equal(shell.text, "shell says hi\n\n['hello.txt']");
    const bash = await cell('%%bash\nfor i in 1 2; do echo "line $i"; done');
    assert.equal(bash.text, 'line 1\nline 2\n');
    const cd = await cell('%cd notes\nopen("hello.txt").read()');
    assert.match(cd.text, /notes\n\n'hello from the workspace\\n'/);
    await cell('%cd ..');
    const env = await cell('%env TETHER_DEMO=42\nimport os\nos.environ["TETHER_DEMO"]');
    assert.equal(env.text, "env: TETHER_DEMO=42\n\n'42'");
    const time = await cell('%time sum(range(10))');
    assert.match(time.text, /Wall time: [\d.]+ \S+s\n\n45$/);
    const timeit = await cell('%%timeit -n 5 -r 2\nsum(range(10))');
    assert.match(timeit.text, /per loop \(mean ± std\. dev\. of 2 runs, 5 loops each\)/);
    if (docker) {
      // The image has no IPython: the reflexive import still works, and Markdown shows as its text.
      const shim = await cell('from IPython.display import display, Markdown\ndisplay(Markdown("**bold**"))');
      assert.equal(shim.text, '**bold**');
    }
    const unknown = await cell('%load_ext autoreload');
    assert.equal(unknown.result.isError, true);
    assert.match(unknown.text, /%load_ext is not supported here/);
  });

  // Off Docker, %pip would install into the host's interpreter: this case runs in the runner image only.
  test('%pip installs for the kernel, evicts the old module, and says plainly when there is no network', {
    skip: !docker && 'needs the runner image',
  }, async () => {
    // Two versions of a tiny wheel, made in the workspace (the run has no network).
    const make = await cell(
      'import zipfile, os\n' +
        'def wheel(v):\n' +
        '    path = f"wheels/v{v}/tetherdemo-{v}.0-py3-none-any.whl"\n' +
        '    os.makedirs(os.path.dirname(path), exist_ok=True)\n' +
        '    info = f"tetherdemo-{v}.0.dist-info"\n' +
        '    files = {"tetherdemo.py": f"VERSION = {v}\\n", f"{info}/METADATA": f"Metadata-Version: 2.1\\nName: tetherdemo\\nVersion: {v}.0\\n",\n' +
        '             f"{info}/WHEEL": "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n", f"{info}/top_level.txt": "tetherdemo\\n"}\n' +
        '    with zipfile.ZipFile(path, "w") as z:\n' +
        '        for name, text in files.items(): z.writestr(name, text)\n' +
        '        z.writestr(f"{info}/RECORD", "".join(f"{n},,\\n" for n in files) + f"{info}/RECORD,,\\n")\n' +
        '    return path\n' +
        'w1, w2 = wheel(1), wheel(2)',
    );
    assert.ok(!make.result.isError, make.text);
    const v1 = await cell(
      '%pip install --no-index --quiet wheels/v1/tetherdemo-1.0-py3-none-any.whl\nimport tetherdemo\ntetherdemo.VERSION',
    );
    assert.ok(!v1.result.isError, v1.text);
    assert.match(v1.text, /1$/);
    const v2 = await cell(
      '%pip install --no-index --quiet --upgrade wheels/v2/tetherdemo-2.0-py3-none-any.whl\nimport tetherdemo\ntetherdemo.VERSION',
    );
    assert.ok(!v2.result.isError, v2.text);
    assert.match(v2.text, /evicted from sys\.modules[^\n]*tetherdemo/);
    assert.match(v2.text, /2$/);
    const offline = await cell('%pip install tether-surely-not-installed-package');
    assert.equal(offline.result.isError, true);
    assert.match(offline.text, /PipError: pip install failed: this run has no network access/);
  });

  test('tool() reads through the registry; write needs the approval the run asks for', async () => {
    const read = await cell('r = tool("read", {"path": "notes/hello.txt"})\nprint(r.structured["totalLines"])\nr');
    assert.ok(!read.result.isError, read.text);
    assert.match(read.text, /^1\n\n'\s+1\\thello from the workspace'$/);
    const cards: string[] = [];
    const write = await cell(
      'tool("write", {"path": "notes/new.txt", "content": "from a cell"})\nopen("notes/new.txt").read()',
      {},
      {
        onQuestion: (q) => (cards.push(q.question), { approved: true }),
      },
    );
    assert.ok(!write.result.isError, write.text);
    assert.deepEqual(cards, ['Allow write (write tier)?']);
    assert.match(write.text, /'from a cell'$/);
    const invalid = await cell('tool("read", {"nope": 1})');
    assert.equal(invalid.result.isError, true);
    assert.match(invalid.text, /ToolError: invalid arguments for read/);
  });

  test('a cell may run a cell of the other language through the bridge, never of its own (it would wait forever)', async () => {
    const r = await cell(
      'args = {"description": "a nested cell for the test suite"}\n' +
        'js = tool("eval", {**args, "language": "javascript", "code": "40 + 2"})\n' +
        'try:\n    tool("eval", {**args, "code": "1"})\nexcept ToolError as e:\n    same = str(e)\n' +
        'str(js), same',
    );
    assert.ok(!r.result.isError, r.text);
    assert.match(
      r.text,
      /^\('42', 'eval refused: the Python interpreter is busy running the cell that is waiting on this call/,
    );
  });

  test('a tool only the client has: forwarded when it accepts bridge calls, unknown otherwise', async () => {
    const code = 'tool("client_lookup", {"q": "owls"})';
    const accepted = await cell(
      code,
      {},
      {
        onBridgeCall: (b) => ({
          content: [{ item: { case: 'text', value: `looked up ${JSON.parse(b.argumentsJson).q} via ${b.tool}` } }],
        }),
      },
    );
    assert.ok(!accepted.result.isError, accepted.text);
    assert.equal(accepted.text, "'looked up owls via client_lookup'");
    assert.equal(accepted.bridgeCalls.length, 1);
    const refused = await cell(code);
    assert.equal(refused.result.isError, true);
    assert.match(refused.text, /ToolError: unknown tool: client_lookup/);
  });

  test('waiting in a bridged call does not count against the inactivity budget', async () => {
    const r = await cell(
      'import time\nt0 = time.time()\nanswer = tool("client_slow", {})\nround(time.time() - t0) >= 2, str(answer)',
      { timeout_seconds: 1 },
      {
        onBridgeCall: async () => {
          await new Promise((res) => setTimeout(res, 2500));
          return { content: [{ item: { case: 'text', value: 'worth the wait' } }] };
        },
      },
    );
    assert.ok(!r.result.isError, r.text);
    assert.equal(r.text, "(True, 'worth the wait')");
  });

  test('several bridged calls in flight at once', async () => {
    let inFlight = 0;
    let most = 0;
    const r = await cell(
      'from concurrent.futures import ThreadPoolExecutor\nwith ThreadPoolExecutor(4) as ex:\n    got = list(ex.map(lambda i: str(tool("client_echo", {"i": i})), range(4)))\ngot',
      {},
      {
        onBridgeCall: async (b) => {
          most = Math.max(most, ++inFlight);
          await new Promise((res) => setTimeout(res, 300));
          inFlight--;
          return { content: [{ item: { case: 'text', value: `echo ${JSON.parse(b.argumentsJson).i}` } }] };
        },
      },
    );
    assert.ok(!r.result.isError, r.text);
    assert.equal(r.text, "['echo 0', 'echo 1', 'echo 2', 'echo 3']");
    assert.ok(most >= 2, `at most ${most} in flight`);
  });

  test('while True: pass is interrupted after the inactivity budget; the kernel keeps its state', async () => {
    await cell('kept = "still here"');
    const r = await cell('while True: pass', { timeout_seconds: 1 });
    assert.equal(r.result.isError, true);
    assert.match(r.text, /KeyboardInterrupt\nThe cell was interrupted because the cell produced no output for 1 s/);
    assert.equal(r.structured.status, 'interrupted');
    assert.equal((await cell('kept')).text, "'still here'");
  });

  test('a client cancel interrupts the cell and the interpreter keeps its state', async () => {
    await cell('survivor = "kept"');
    const abort = new AbortController();
    setTimeout(() => abort.abort('changed my mind'), 500);
    const r = await cell(
      'import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    interrupted = True\n    raise',
      {},
      { signal: abort.signal },
    );
    assert.equal(r.result.isError, true);
    assert.match(r.text, /cancelled/);
    // The next cell queues behind the cancelled one: it answers because the interrupt stopped it.
    assert.equal((await cell('survivor, interrupted')).text, "('kept', True)");
  });

  test('a passed deadline interrupts the cell too', async () => {
    await assert.rejects(
      cell('import time\ntime.sleep(60)', {}, { deadlineMs: 800 }),
      (e: ServiceError) => e.code === status.DEADLINE_EXCEEDED,
    );
    // Queued behind the sleeping cell, this answers only because the deadline interrupted it.
    assert.equal((await cell('"awake"')).text, "'awake'");
  });

  test('os._exit(1) resets the interpreter cleanly', async () => {
    await cell('doomed = 1');
    const r = await cell('import os\nos._exit(1)');
    assert.equal(r.result.isError, true);
    assert.match(
      r.text,
      /The Python interpreter exited with code 1 during the cell, so it has been reset and its state .* is lost/,
    );
    assert.equal(r.structured.interpreterReset, true);
    const after = await cell('"doomed" in globals(), 1 + 1');
    assert.equal(after.text, '(False, 2)');
  });

  test('a 50 MB print is capped, not carried whole', async () => {
    let progressChars = 0;
    const r = await cell(
      'print("x" * 50_000_000)\nprint("the end")',
      {},
      { onProgress: (p) => (progressChars += p.length) },
    );
    assert.ok(!r.result.isError, r.text);
    assert.ok(r.text.length < 40_000, `result text is ${r.text.length} chars`);
    assert.match(r.text, /… \d+ characters of output omitted …/);
    assert.match(r.text, /the end\n$/);
    assert.ok(r.structured.omittedChars > 49_000_000);
    assert.ok(progressChars > 0 && progressChars <= 256 * 1024, `progress carried ${progressChars} chars`);
  });

  test('reset starts a clean interpreter', async () => {
    await cell('before_reset = 1');
    const r = await cell('"before_reset" in globals()', { reset: true });
    assert.equal(r.text, 'False');
  });
});

describe('javascript', () => {
  const js = (code: string, extra: Record<string, unknown> = {}, opts: CallOptions = {}) =>
    cell(code, { language: 'javascript', ...extra }, opts);

  test('state, echo, console.log, redeclaration and top-level await', async () => {
    const a = await js('const n = 20\nconsole.log("set", { n })\nn + 1');
    assert.ok(!a.result.isError, a.text);
    assert.equal(a.text, 'set { n: 20 }\n\n21');
    const b = await js('const n = 2; const m = await Promise.resolve(n * 10); m');
    assert.equal(b.text, '20');
    assert.equal((await js('n + m')).text, '22');
    const err = await js('function boom() { throw new TypeError("bad") }\nboom()');
    assert.equal(err.result.isError, true);
    assert.match(err.text, /TypeError: bad\n\s+at boom cell line 1:\d+\n\s+at cell line 2:1/);
    assert.equal((await js('m')).text, '20');
    const imported = await js('import { join } from "node:path"\njoin("a", "b")');
    assert.equal(imported.text, "'a/b'");
  });

  test('await tool() in flight together; display() of records is a table', async () => {
    const r = await js(
      'const [hello, missing] = await Promise.allSettled([tool("read", { path: "notes/hello.txt" }), tool("read", { path: "nope.txt" })])\n' +
        'display([{ file: "hello", ok: hello.status }, { file: "nope", ok: missing.status }])\nhello.value.structured.totalLines',
    );
    assert.ok(!r.result.isError, r.text);
    const table = r.result.content.find((c) => c.item.case === 'table');
    assert.ok(table && table.item.case === 'table');
    assert.deepEqual(
      table.item.value.rows.map((row) => row.cells),
      [
        ['0', 'hello', 'fulfilled'],
        ['1', 'nope', 'rejected'],
      ],
    );
    assert.match(r.text, /1$/);
  });

  test('an endless loop is interrupted and the kernel still answers', async () => {
    await js('globalThis.kept = "js state"');
    const r = await js('while (true) {}', { timeout_seconds: 1 });
    assert.equal(r.result.isError, true);
    assert.equal(r.structured.status, 'interrupted');
    assert.equal((await js('kept')).text, "'js state'");
  });
});

test('a read-capped surface never reaches eval, and a bridged write under a read cap is an unknown tool', async () => {
  // Over gRPC: plan mode is capped at read, so eval is absent exactly like a tool that does not exist.
  const absent = (tool: string) =>
    t.alice
      .callTool(
        runId,
        tool,
        { code: '1', description: 'run a cell for the test suite' },
        { surface: { mode: SurfaceMode.PLAN } },
      )
      .then(
        () => assert.fail('expected NOT_FOUND'),
        (e: ServiceError) => e,
      );
  const [evalErr, unknownErr] = await Promise.all([absent('eval'), absent('no_such_tool')]);
  assert.equal(evalErr.code, status.NOT_FOUND);
  assert.equal(evalErr.code, unknownErr.code);
  assert.equal(evalErr.details.replace('eval', 'X'), unknownErr.details.replace('no_such_tool', 'X'));

  // Inside the gateway: the bridge of a cell whose caller is capped at read (the cap a bridged
  // call inherits) refuses write with the very answer an unknown tool gets.
  const run = t.gateway.runs.ready('alice', runId);
  const sink: CallSink = {
    gone: false,
    write: () => undefined,
    end: () => undefined,
    fail: () => undefined,
    onGone: () => undefined,
  };
  const start = create(CallToolStartSchema, { acceptsBridgeCalls: false });
  const stream = new CallStream(sink, start, '', 60);
  const caller = { cap: 'read', port: stream, observed: Telemetry.off.call('alice', start, undefined) };
  const invoker = new ToolInvoker() as unknown as {
    bridge(r: unknown, tool: string, args: unknown, caller: unknown, depth: number): Promise<RunnerResult>;
  };
  const code =
    'out = []\nfor name in ("write", "read"):\n    try:\n        tool(name, {"path": "notes/capped.txt", **({"content": "x"} if name == "write" else {})})\n        out.append(name + ": ran")\n    except ToolError as e:\n        out.append(name + ": " + str(e))\nout';
  const result = await run.runner.callTool(
    'eval',
    { code, description: 'call write under a read cap' },
    { maxTier: 'read' },
    {
      progress: () => undefined,
      ask: async () => ({ kind: 'unavailable', reason: 'none' }),
      bridge: (name, args) => invoker.bridge(run, name, args, caller, 1),
    },
    new AbortController().signal,
  );
  const text = result.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');
  assert.ok(!result.isError, text);
  assert.match(text, /\['write: unknown tool: write', ["']read: [^"']*(ENOENT|no such file)/i);
  stream.dispose();
});
