import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { ToolResult } from '../../../protocol/src/tools';
import { Kernel, type CellListener } from '../../../runner/src/tools/eval/kernel';
import { KernelManager } from '../../../runner/src/tools/eval/kernelManager';
import { DEFAULT_SETTINGS } from '../../../runner/src/tools/eval/schemas';

/** driver.py as a script file of its own, run by the real python3 (see also kernel.test.ts). */
const cwd = mkdtempSync(path.join(os.tmpdir(), 'tether-driver-'));
const kernels = new KernelManager(DEFAULT_SETTINGS, cwd);
after(async () => {
  await kernels.stopAll();
  rmSync(cwd, { recursive: true, force: true });
});

async function run(kernel: Kernel, code: string): Promise<string> {
  let text = '';
  const listener: CellListener = {
    message: (msg) => {
      if (msg.t === 'stream') text += msg.text;
      if (msg.t === 'display' && msg.item.type === 'text') text += msg.item.text;
      if (msg.t === 'error') text += msg.traceback;
    },
    raw: (_name, t) => void (text += t),
    tool: async (): Promise<ToolResult> => ({ content: [{ type: 'text', text: 'ok' }] }),
  };
  await kernel.execute(code, listener);
  return text;
}

test('cells import from the working directory, not from the folder of the driver script', async () => {
  writeFileSync(path.join(cwd, 'local_module.py'), 'ANSWER = 42\n');
  const kernel = await kernels.kernel('python', false);
  assert.equal(await run(kernel, 'import local_module\nlocal_module.ANSWER'), '42');
  assert.match(await run(kernel, 'import driver'), /ModuleNotFoundError: No module named 'driver'/);
});

test("cells are compiled without the driver's __future__ imports", async () => {
  const kernel = await kernels.kernel('python', false);
  assert.equal(await run(kernel, 'class A:\n    x: int\nA.__annotations__["x"] is int'), 'True');
});

test("a cell's traceback shows the cell's frames and none of the driver's", async () => {
  const kernel = await kernels.kernel('python', false);
  const text = await run(kernel, 'def f():\n    return 1 / 0\nf()');
  assert.match(
    text,
    /^Traceback \(most recent call last\):\n {2}cell line 3, in <module>\n {4}f\(\)\n {2}cell line 2, in f\n/,
  );
  assert.ok(!text.includes('driver.py'), text);
});

test('a driver whose wire.json disagrees with it does not start, and says why', async () => {
  const launch = kernels.launchOf('python');
  const driver = launch.args[1];
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-wire-'));
  try {
    mkdirSync(path.join(dir, 'python'));
    cpSync(driver, path.join(dir, 'python', 'driver.py'));
    const wire = JSON.parse(readFileSync(path.join(path.dirname(driver), '..', 'wire.json'), 'utf8'));
    delete wire.commands.exec.code;
    writeFileSync(path.join(dir, 'wire.json'), JSON.stringify(wire));
    const args = [...launch.args];
    args[1] = path.join(dir, 'python', 'driver.py');
    await assert.rejects(
      Kernel.start({ ...launch, args }, 10_000),
      /exited while starting[\s\S]*WireError: wire.json does not declare the command exec with the fields cell, code/,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a saved value that does not read back is named and skipped; the values after it come back', async () => {
  writeFileSync(path.join(cwd, 'gone_module.py'), 'class Gone:\n    pass\n');
  const first = await kernels.kernel('python', true);
  await run(first, "before = [1, 2]\nfrom gone_module import Gone\nb = Gone()\nafter = {'k': 7}");
  const file = path.join(cwd, 'skip.state');
  rmSync(file, { force: true });
  const saved = await first.state({ t: 'save_state', path: file, limit: 1 << 20 });
  assert.deepEqual(saved.variables, ['before', 'Gone', 'b', 'after']);
  rmSync(path.join(cwd, 'gone_module.py'));
  const second = await kernels.kernel('python', true);
  const back = await second.state({ t: 'load_state', path: file });
  assert.deepEqual(back.variables, ['before', 'after']);
  assert.deepEqual(
    back.notKept.map((n) => n.what),
    ['variable Gone', 'variable b'],
  );
  assert.match(back.notKept[1]?.why ?? '', /could not be read back \(ModuleNotFoundError/);
  assert.equal(await run(second, "before, after['k']"), '([1, 2], 7)');
});

test('a state saved in the first format (each value as bytes inside its record) still loads', async () => {
  const file = path.join(cwd, 'v1.state');
  rmSync(file, { force: true });
  const writer = await kernels.kernel('python', true);
  await run(
    writer,
    [
      'import pickle',
      `with open(${JSON.stringify(file)}, 'wb') as f:`,
      "    pickle.dump({'format': 'tether-python-state', 'version': 1, 'serializer': 'pickle', 'python': '3'}, f)",
      "    pickle.dump(('module', 'j', 'json'), f)",
      "    pickle.dump(('variable', 'x', pickle.dumps([3, 4])), f)",
      "    pickle.dump(('end', 2), f)",
    ].join('\n'),
  );
  const reader = await kernels.kernel('python', true);
  const back = await reader.state({ t: 'load_state', path: file });
  assert.deepEqual(back.variables, ['x']);
  assert.deepEqual(back.modules, { j: 'json' });
  assert.equal(await run(reader, 'x, j.dumps(1)'), "([3, 4], '1')");
});

test('a saved state names the modules its load will import; a new kernel imports them ahead, skipping what fails', async () => {
  const first = await kernels.kernel('python', true);
  await run(first, 'import fractions\nimport json as j\nthird = fractions.Fraction(1, 3)');
  const file = path.join(cwd, 'ahead.state');
  rmSync(file, { force: true });
  const saved = await first.state({ t: 'save_state', path: file, limit: 1 << 20 });
  const imports = saved.imports ?? [];
  assert.ok(imports.includes('fractions') && imports.includes('json'), String(imports));
  assert.ok(imports.includes(saved.serializer), String(imports));
  const second = await kernels.kernel('python', true);
  assert.equal(await run(second, "import sys\n'fractions' in sys.modules"), 'False');
  await second.importModules([...imports, 'no_such_module_anywhere']);
  assert.equal(await run(second, "'fractions' in sys.modules"), 'True');
  const back = await second.state({ t: 'load_state', path: file });
  assert.deepEqual(back.variables, ['third']);
  assert.equal(await run(second, 'third * 3, j.dumps(2)'), "(Fraction(1, 1), '2')");
});
