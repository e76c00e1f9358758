import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { debugRun, fixture, type DebugRun } from './helpers';

/** The hard session TTL, made short through the gateway's runner.debug settings. */
let t: TestGateway;
let d: DebugRun;

before(async () => {
  t = await startTestGateway({ runner: { debug: { ttlSeconds: 3 } } });
  d = await debugRun(t, 'conv-ttl', fixture('python'));
});

after(async () => {
  if (d) await t.alice.deleteRun(d.runId).catch(() => undefined);
  await t?.close();
});

test('a session past its TTL is terminated and cleaned up, says so once, and the next launch works', async () => {
  await d.ok({ op: 'breakpoints', file: 'app.py', lines: [12] });
  await d.ok({ op: 'launch', program: 'app.py' });
  const debuggee = Number((await d.ok({ op: 'evaluate', expression: '__import__("os").getpid()' })).structured.value);
  const status = await d.ok({ op: 'status' });
  assert.match(status.text, /ends in \d seconds \(TTL\)/);
  const adapterPid = status.structured.adapterPid;

  await new Promise((r) => setTimeout(r, 4000));
  assert.equal(await d.alive(adapterPid), false, 'the adapter was stopped at expiry');
  assert.equal(await d.alive(debuggee), false, 'the program was stopped at expiry');
  const expired = await d.fails({ op: 'stack' });
  assert.match(
    expired.text,
    /no debug session is running \(the last session, dbg-1, ended: expired: debug sessions end after 3 seconds\)/,
  );
  assert.doesNotMatch((await d.ok({ op: 'status' })).text, /expired/, 'told once');

  const again = await d.ok({ op: 'launch', program: 'app.py' });
  assert.match(again.text, /session dbg-2/);
  assert.equal(again.structured.line, 12);
  await d.ok({ op: 'terminate' });
});
