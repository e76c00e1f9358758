import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ToolRegistry } from '../../../runner/src/registry';
import { ok, type ToolContext, type ToolDefinition } from '../../../runner/src/tool';
import { CallCancellation } from '../../../runner/src/util/cancellation';
import { runnerContext } from '../../helpers/runner';

/** A context as the runner's sessions make it: the signal made only when asked for. */
function lazyContext(cancellation: CallCancellation): ToolContext {
  return {
    ...runnerContext(),
    get signal() {
      return cancellation.signal;
    },
    cancellation,
  };
}

function tool(run: ToolDefinition['run']): ToolRegistry {
  const r = new ToolRegistry();
  r.register({ name: 't', description: '', tier: 'read', inputSchema: {}, parallelSafe: true, run });
  return r;
}

test('a signal made after the call was cancelled is aborted already, with the reason', () => {
  const c = new CallCancellation();
  const told: string[] = [];
  c.onAbort(() => told.push('before'));
  c.abort('cancelled by the client');
  c.abort('again');
  c.onAbort(() => told.push('after'));
  assert.deepEqual(told, ['before', 'after'], 'each listener once; a late one at once');
  assert.equal(c.signal.aborted, true);
  assert.equal(c.signal.reason, 'cancelled by the client');
});

test('a signal made before the cancellation is aborted by it', () => {
  const c = new CallCancellation();
  const signal = c.signal;
  assert.equal(signal.aborted, false);
  assert.equal(c.signal, signal, 'one signal per call');
  c.abort('stop');
  assert.equal(signal.aborted, true);
  assert.equal(signal.reason, 'stop');
});

test('a tool watching the signal it asked for ends with the cancellation', async () => {
  const c = new CallCancellation();
  const r = tool(
    (_args, ctx) =>
      new Promise((resolve) =>
        ctx.signal.addEventListener('abort', () => resolve(ok('stopped early')), { once: true }),
      ),
  );
  const call = r.call('t', {}, lazyContext(c));
  setImmediate(() => c.abort('cancelled by the client'));
  assert.deepEqual(await call, {
    content: [
      { type: 'text', text: 'cancelled: cancelled by the client' },
      { type: 'text', text: 'stopped early' },
    ],
    isError: true,
  });
});

test('a tool that never looks at its signal is cut after the grace', async () => {
  const c = new CallCancellation();
  const r = tool(() => new Promise(() => undefined));
  const call = r.call('t', {}, lazyContext(c));
  c.abort('cancelled by the client');
  // The grace's timer does not hold the process; the test does, meanwhile.
  const hold = setTimeout(() => undefined, 10_000);
  try {
    assert.deepEqual(await call, {
      content: [{ type: 'text', text: 'cancelled: cancelled by the client' }],
      isError: true,
      structured: undefined,
    });
  } finally {
    clearTimeout(hold);
  }
});

test('a call nobody cancels makes no signal', async () => {
  const c = new CallCancellation();
  let made = false;
  const ctx = lazyContext(c);
  const watched = Object.defineProperty({ ...ctx }, 'signal', {
    get() {
      made = true;
      return c.signal;
    },
  });
  assert.deepEqual(await tool(async () => ok('x')).call('t', {}, watched), ok('x'));
  assert.equal(made, false);
});
