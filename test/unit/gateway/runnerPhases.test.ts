import { test } from 'node:test';
import assert from 'node:assert/strict';
import { recordRunnerPhases } from '../../../gateway/src/observability/runnerPhases';
import type { TraceSpan } from '../../../gateway/src/observability/tracing';
import { phase, traced, MAX_PHASES } from '../../../runner/src/util/phases';

function recorder(): { span: TraceSpan; recorded: unknown[][] } {
  const recorded: unknown[][] = [];
  const span: TraceSpan = {
    child: () => span,
    set: () => undefined,
    fail: () => undefined,
    end: () => undefined,
    record: (...args) => void recorded.push(args),
    traceparent: () => '',
  };
  return { span, recorded };
}

test('runner phases: measured only under a traced call, as offsets from its start, failures kept', async () => {
  const untraced = await traced(undefined, () => phase('lsp.request', { m: 'x' }, async () => ({ content: [] })));
  assert.equal('phases' in untraced, false);
  // Outside any call a phase just runs.
  assert.equal(await phase('p', {}, async () => 7), 7);

  const reply = await traced('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', async () => {
    await new Promise((r) => setTimeout(r, 5));
    await phase('lsp.request', { 'lsp.method': 'textDocument/hover' }, () => new Promise((r) => setTimeout(r, 20)));
    await phase('eval.cell', {}, async () => {
      throw new Error('boom');
    }).catch(() => undefined);
    return { content: [{ type: 'text', text: 'ok' }] };
  });
  assert.equal(reply.phases?.length, 2);
  const [req, cell] = reply.phases!;
  assert.equal(req.name, 'lsp.request');
  assert.deepEqual(req.attributes, { 'lsp.method': 'textDocument/hover' });
  assert.ok(req.startMs >= 4 && req.durationMs >= 18, JSON.stringify(req));
  assert.equal(cell.error, 'boom');

  const many = await traced('tp', async () => {
    for (let i = 0; i < MAX_PHASES + 10; i++) await phase('p', {}, async () => undefined);
    return { content: [] };
  });
  assert.equal(many.phases?.length, MAX_PHASES);
});

test('the gateway records runner phases as finished children and drops malformed ones', () => {
  const { span, recorded } = recorder();
  recordRunnerPhases(span, [
    { name: 'lsp.request', startMs: 1.5, durationMs: 3, attributes: { 'lsp.method': 'x', nested: { no: 1 } } },
    { name: 'eval.cell', startMs: 2, durationMs: 1, error: 'boom' },
    { name: 'bad', startMs: -1, durationMs: 1 },
    { name: 'bad', startMs: 1, durationMs: Number.NaN },
    { startMs: 1, durationMs: 1 },
    null,
    'x',
  ]);
  recordRunnerPhases(span, 'not a list');
  assert.deepEqual(recorded, [
    ['lsp.request', 1.5, 3, { 'lsp.method': 'x', 'tether.side': 'runner' }, undefined],
    ['eval.cell', 2, 1, { 'tether.side': 'runner' }, 'boom'],
  ]);
});
