import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import { ContentSchema, ToolResultSchema } from '@tether/contract';
import { executionLines } from '../../../gateway/src/e2b/interpreter';
import { fromWorkspace, toWorkspace } from '../../../gateway/src/e2b/paths';
import { SandboxTokens } from '../../../gateway/src/e2b/tokens';

test('E2B paths: /home/user and the workspace are one place; anything else is refused', () => {
  assert.equal(toWorkspace('/home/user', '/workspace'), '.');
  assert.equal(toWorkspace('/home/user/a/b.txt', '/workspace'), 'a/b.txt');
  assert.equal(toWorkspace('a/b.txt', '/workspace'), 'a/b.txt');
  assert.equal(toWorkspace('~/x', '/workspace'), 'x');
  assert.equal(toWorkspace('/workspace/x', '/workspace'), 'x');
  for (const bad of ['/etc/passwd', '../escape', '/home/user/../x', '/home/username/x', ''])
    assert.throws(() => toWorkspace(bad, '/workspace'), /outside|empty/, bad);
  assert.throws(() => toWorkspace('a\0b', '/workspace'), /NUL/);
  assert.equal(fromWorkspace('/workspace/a.txt', '/workspace'), '/home/user/a.txt');
  assert.equal(fromWorkspace('/workspace', '/workspace'), '/home/user');
});

test('sandbox tokens name one run and need the key', () => {
  const a = new SandboxTokens('key-1');
  const token = a.issue('run-1');
  assert.ok(a.verify('run-1', token));
  assert.ok(!a.verify('run-2', token));
  assert.ok(!a.verify('run-1', undefined));
  assert.ok(!a.verify('run-1', `${token}x`));
  assert.ok(!new SandboxTokens('key-2').verify('run-1', token));
  assert.ok(new SandboxTokens('key-1').verify('run-1', token), 'replicas sharing the key agree');
});

const text = (value: string) => create(ContentSchema, { item: { case: 'text', value } });

test('an eval result as /execute lines: printed text, displayed results, the main result, the error', () => {
  const ok = create(ToolResultSchema, {
    content: [
      text('printed\n'),
      create(ContentSchema, { item: { case: 'image', value: { mime: 'image/png', data: new Uint8Array([1, 2]) } } }),
      text('42'),
    ],
    structuredJson: JSON.stringify({ executionCount: 3, status: 'ok', displayed: [1, 2] }),
  });
  const lines = executionLines(ok);
  assert.deepEqual(lines[0], { type: 'stdout', text: 'printed\n', timestamp: lines[0]!.timestamp });
  assert.equal(lines[1]!.png, Buffer.from([1, 2]).toString('base64'));
  assert.equal(lines[1]!.is_main_result, false);
  assert.deepEqual(lines[2], { type: 'result', is_main_result: true, text: '42' });
  assert.deepEqual(lines[3], { type: 'number_of_executions', execution_count: 3 });

  const tb = 'Traceback (most recent call last):\nZeroDivisionError: division by zero';
  const failed = create(ToolResultSchema, {
    content: [text(`before\n${tb}`)],
    isError: true,
    structuredJson: JSON.stringify({
      executionCount: 4,
      status: 'error',
      displayed: [],
      error: { type: 'ZeroDivisionError', message: 'division by zero', traceback: tb },
    }),
  });
  const f = executionLines(failed);
  assert.equal(f[0]!.text, 'before\n', 'the traceback is the error, not stdout');
  assert.deepEqual(f[1], { type: 'error', name: 'ZeroDivisionError', value: 'division by zero', traceback: tb });

  const table = create(ToolResultSchema, {
    content: [
      create(ContentSchema, {
        item: { case: 'table', value: { columns: ['a'], rows: [{ cells: ['<1>'] }], omittedRows: 0 } },
      }),
    ],
    structuredJson: JSON.stringify({ executionCount: 1, displayed: [0] }),
  });
  const [row] = executionLines(table);
  assert.equal(row!.text, 'a\n<1>');
  assert.match(String(row!.html), /<td>&lt;1&gt;<\/td>/);
});

test("a resume's notice before the cell's items is neither output nor a result", () => {
  const resumed = create(ToolResultSchema, {
    content: [text('The run was paused and resumed …'), text('41')],
    structuredJson: JSON.stringify({ executionCount: 2, displayed: [0], items: 1 }),
  });
  const lines = executionLines(resumed);
  assert.deepEqual(lines[0], { type: 'result', is_main_result: true, text: '41' });
  assert.equal(lines.length, 2);
});
