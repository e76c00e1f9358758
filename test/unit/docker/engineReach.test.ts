import { test } from 'node:test';
import assert from 'node:assert/strict';
import { engineUnreachable } from '../../../gateway/src/sandbox/engineReach';

const err = (props: Record<string, unknown>, message = 'x') => Object.assign(new Error(message), props);

test('an engine that went away is told from an answer it gave', () => {
  assert.ok(engineUnreachable(err({ code: 'ECONNREFUSED' }, 'connect ECONNREFUSED /var/run/docker.sock')));
  assert.ok(engineUnreachable(err({ code: 'ENOENT' }, 'connect ENOENT /var/run/docker.sock')));
  assert.ok(engineUnreachable(err({ code: 'ECONNRESET' })));
  assert.ok(engineUnreachable(new Error('socket hang up')));
  // An answer, however bad, is from an engine that is there.
  assert.ok(!engineUnreachable(err({ statusCode: 500, code: 'ECONNRESET' })));
  assert.ok(!engineUnreachable(err({ statusCode: 404 })));
  assert.ok(!engineUnreachable(new Error('no such image')));
  assert.ok(!engineUnreachable(undefined));
});
