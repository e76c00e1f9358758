import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, truncateSync } from 'node:fs';
import * as path from 'node:path';
import type { RestoreResult, SuspendResult } from '../../../protocol/src/suspend';
import { PORTABLE_STATE_DIR, RestoreCommand, SuspendCommand } from '../../../protocol/src/suspend';
import type { ToolResult } from '../../../protocol/src/tools';
import { runnerFor, tempWorkspace } from '../../helpers/runner';

/**
 * An eval kernel's variables across a pause: suspend in one runner, stop it, restore in a new
 * runner over the same workspace, against the real python3 and node of the host.
 */

const textOf = (r: ToolResult) => r.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');
const DESCRIPTION = 'a cell of the pause test';

type Runner = Awaited<ReturnType<typeof runnerFor>>;

async function cell(r: Runner, code: string, language: 'python' | 'javascript' = 'python'): Promise<string> {
  const res = await r.call('eval', { code, language, description: DESCRIPTION });
  assert.ok(!res.isError, textOf(res));
  return textOf(res);
}

async function suspend(r: Runner): Promise<SuspendResult> {
  const cmd = SuspendCommand.type;
  return (await r.run.command({
    family: cmd.family,
    command: cmd.command,
    payload: { reason: 'test' },
  })) as SuspendResult;
}

async function restore(r: Runner): Promise<RestoreResult> {
  const cmd = RestoreCommand.type;
  return (await r.run.command({ family: cmd.family, command: cmd.command, payload: {} })) as RestoreResult;
}

/** Suspends a runner, stops it, and restores a new one on the same workspace. */
async function pauseAndResume(first: Runner, settings: Record<string, unknown> = {}) {
  const suspended = await suspend(first);
  await first.run.stop();
  const second = await runnerFor({ eval: true }, settings, first.workspace);
  const restored = await restore(second);
  return { suspended, second, restored };
}

function canImport(python: string, module: string): boolean {
  return spawnSync(python, ['-c', `import ${module}`], { stdio: 'ignore' }).status === 0;
}

const PYTHON = 'python3';
const hasDill = canImport(PYTHON, 'dill') || canImport(PYTHON, 'cloudpickle');
const hasPandas = canImport(PYTHON, 'pandas');

test('python: variables, a function and imports survive a pause; an open file is named as not kept', async () => {
  const first = await runnerFor({ eval: true }, { eval: { python: PYTHON } });
  await cell(
    first,
    [
      'import json as js',
      'import os.path',
      'n = 41',
      'd = {"a": [1, 2, 3], "b": {"c": "x"}}',
      'square = lambda x: x * x',
      'def bump(k):\n    return n + k',
      'f = open(os.devnull)',
      'g = (i for i in range(3))',
      'show = display',
    ].join('\n'),
  );
  if (hasPandas)
    await cell(first, 'import pandas as pd\ndf = pd.DataFrame({"x": range(1000), "y": [str(i) for i in range(1000)]})');
  const { suspended, second, restored } = await pauseAndResume(first, { eval: { python: PYTHON } });
  try {
    assert.equal(suspended.written, true);
    const kernel = suspended.kernels.find((k) => k.language === 'python');
    assert.ok(kernel, JSON.stringify(suspended));
    assert.ok(
      suspended.notKept.some((n) => /variable f\b/.test(n.what) && /open file/.test(n.why)),
      JSON.stringify(suspended.notKept),
    );
    assert.ok(suspended.notKept.some((n) => /variable g\b/.test(n.what) && /generator/.test(n.why)));
    assert.ok(suspended.notKept.some((n) => /variable show\b/.test(n.what) && /kernel's own helpers/.test(n.why)));
    assert.equal(restored.outcome, 'restored', restored.problem);
    assert.match(restored.notice, /paused .* resumed/);
    assert.match(restored.notice, /Not kept:\n.*python variable f \(TextIOWrapper\): an open file/);
    assert.equal(await cell(second, 'n + 1'), '42');
    assert.equal(await cell(second, 'js.dumps(d, sort_keys=True)'), '\'{"a": [1, 2, 3], "b": {"c": "x"}}\'');
    assert.equal(await cell(second, 'os.path.basename("/a/b")'), "'b'");
    assert.equal(await cell(second, '"f" in globals(), "g" in globals()'), '(False, False)');
    if (hasDill) {
      assert.equal(kernel.serializer === 'dill' || kernel.serializer === 'cloudpickle', true);
      // A function defined in a cell sees the namespace it is back in.
      assert.equal(await cell(second, 'square(7), bump(1)'), '(49, 42)');
      await cell(second, 'n = 100');
      assert.equal(await cell(second, 'bump(1)'), '101');
    } else {
      assert.ok(restored.notKept.some((n) => /variable square/.test(n.what) && /standard pickle/.test(n.why)));
    }
    if (hasPandas) {
      assert.equal(await cell(second, 'int(df["x"].sum()), df.shape, pd.__name__'), "(499500, (1000, 2), 'pandas')");
    }
  } finally {
    await second.run.stop();
  }
});

test('python: a 100 MB pandas DataFrame round-trips', {
  skip: hasPandas ? false : `pandas is not importable by ${PYTHON}`,
}, async () => {
  const first = await runnerFor({ eval: true }, { eval: { python: PYTHON } });
  await cell(
    first,
    'import numpy as np\nimport pandas as pd\nbig = pd.DataFrame({"v": np.arange(13_107_200, dtype="float64")})\nbig.memory_usage(index=False).sum()',
  );
  const { suspended, second, restored } = await pauseAndResume(first, { eval: { python: PYTHON } });
  try {
    assert.ok(suspended.bytes > 100 * 1024 * 1024, String(suspended.bytes));
    assert.equal(restored.outcome, 'restored', restored.problem);
    assert.equal(
      await cell(second, 'len(big), float(big["v"].iloc[-1]), type(big).__name__'),
      "(13107200, 13107199.0, 'DataFrame')",
    );
  } finally {
    await second.run.stop();
  }
});

test('python with only the standard pickle: data comes back, cell functions are named', {
  skip: existsSync('/usr/bin/python3') ? false : 'no /usr/bin/python3 on this machine',
}, async (t) => {
  const python = '/usr/bin/python3';
  if (canImport(python, 'dill') || canImport(python, 'cloudpickle'))
    return t.skip(`${python} has dill or cloudpickle: the pickle fallback is not what would run`);
  const settings = { eval: { python } };
  const first = await runnerFor({ eval: true }, settings);
  await cell(first, 'import math\nxs = [1.5, 2.5]\ndef area(r):\n    return math.pi * r * r');
  const { suspended, second, restored } = await pauseAndResume(first, settings);
  try {
    assert.equal(suspended.kernels[0]?.serializer, 'pickle');
    assert.equal(restored.outcome, 'restored');
    assert.ok(restored.notKept.some((n) => /variable area/.test(n.what) && /standard pickle/.test(n.why)));
    assert.equal(await cell(second, 'sum(xs), math.floor(math.pi)'), '(4.0, 3)');
  } finally {
    await second.run.stop();
  }
});

test('python: a variable past the size limit is named, the rest is kept', async () => {
  const settings = { eval: { python: PYTHON }, portable: { maxStateMB: 1 } };
  const first = await runnerFor({ eval: true }, settings);
  await cell(first, 'small = "s"\nbig = b"x" * (2 * 1024 * 1024)');
  const { suspended, second, restored } = await pauseAndResume(first, settings);
  try {
    assert.ok(suspended.notKept.some((n) => /variable big/.test(n.what) && /pass the limit/.test(n.why)));
    assert.ok(suspended.bytes < 1024 * 1024);
    assert.equal(restored.outcome, 'restored');
    assert.equal(await cell(second, 'small, "big" in globals()'), "('s', False)");
  } finally {
    await second.run.stop();
  }
});

test('javascript: plain data and required modules survive; functions and class instances are named', async () => {
  const first = await runnerFor({ eval: true });
  await cell(
    first,
    [
      'const n = 41;',
      'let o = { a: [1, 2, { b: "c" }], m: new Map([["k", 1]]), when: new Date(0) };',
      'const path = require("node:path");',
      'function twice(x) { return 2 * x; }',
      'class Point { #secret = 1; constructor(x) { this.x = x; } }',
      'var p = new Point(3);',
      'var holder = { cb: () => 1 };',
    ].join('\n'),
    'javascript',
  );
  const { suspended, second, restored } = await pauseAndResume(first);
  try {
    const kernel = suspended.kernels.find((k) => k.language === 'javascript');
    assert.equal(kernel?.serializer, 'v8');
    assert.equal(kernel?.modules, 1);
    const notKept = suspended.notKept.map((n) => `${n.what}: ${n.why}`).join('\n');
    assert.match(notKept, /javascript variable twice \(function\): a function/);
    assert.match(notKept, /javascript variable Point \(function\): a function/);
    assert.match(notKept, /javascript variable p \(object\): an instance of Point/);
    assert.match(notKept, /javascript variable holder \(object\): \.cb is a function/);
    assert.equal(restored.outcome, 'restored');
    assert.equal(await cell(second, 'n + 1', 'javascript'), '42');
    assert.equal(
      await cell(second, 'JSON.stringify([o.a, o.m.get("k"), o.when.getTime(), path.basename("/x/y")])', 'javascript'),
      '\'[[1,2,{"b":"c"}],1,0,"y"]\'',
    );
    assert.equal(await cell(second, 'typeof twice', 'javascript'), "'undefined'");
  } finally {
    await second.run.stop();
  }
});

test('a runner with no saved state says so, and restores nothing', async () => {
  const r = await runnerFor({ eval: true }, {}, tempWorkspace());
  try {
    const restored = await restore(r);
    assert.equal(restored.outcome, 'none');
    assert.match(restored.problem ?? '', /no manifest/);
    assert.match(restored.notice, /without saved state/);
  } finally {
    await r.run.stop();
  }
});

test('a torn kernel state: the kernel started ahead of the restore holds none of it, and answers', async () => {
  const first = await runnerFor({ eval: true });
  await cell(first, 'kept = 41');
  const suspended = await suspend(first);
  assert.equal(suspended.kernels[0]?.language, 'python');
  await first.run.stop();
  const dir = path.join(first.workspace, PORTABLE_STATE_DIR, 'state');
  const generation = readdirSync(dir).find((e) => e.startsWith('g-'))!;
  truncateSync(path.join(dir, generation, 'eval', 'python.state'), 16);
  const second = await runnerFor({ eval: true }, {}, first.workspace);
  try {
    const restored = await restore(second);
    assert.equal(restored.outcome, 'torn');
    assert.deepEqual(restored.kernels, []);
    assert.equal(await cell(second, "'kept' in globals()"), 'False');
    assert.equal(await cell(second, '1 + 1'), '2');
  } finally {
    await second.run.stop();
  }
});
