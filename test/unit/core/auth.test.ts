import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Metadata, status } from '@grpc/grpc-js';
import { TokenAuthenticator } from '../../../gateway/src/auth';
import { GatewayError } from '../../../gateway/src/errors';
import { loadConfig, parseTokenList } from '../../../gateway/src/config';

const auth = new TokenAuthenticator({ 'secret-a': 'alice', 'secret-b': 'bob' });
const md = (v?: string) => {
  const m = new Metadata();
  if (v !== undefined) m.set('authorization', v);
  return m;
};

test('a bearer token maps to its tenant', () => {
  assert.equal(auth.authenticate(md('Bearer secret-a')), 'alice');
  assert.equal(auth.authenticate(md('bearer secret-b')), 'bob');
});

test('no token and a wrong token are UNAUTHENTICATED', () => {
  for (const m of [md(), md('secret-a'), md('Bearer '), md('Bearer secret-c'), md('Bearer secret-a2')]) {
    assert.throws(
      () => auth.authenticate(m),
      (e: unknown) => e instanceof GatewayError && e.code === status.UNAUTHENTICATED,
    );
  }
});

test('token lists parse and malformed ones are refused', () => {
  assert.deepEqual(parseTokenList('a=x, b=y'), { a: 'x', b: 'y' });
  assert.throws(() => parseTokenList('a'), /token=tenant/);
});

test('config: the process provider must be enabled explicitly, and tokens are required', () => {
  assert.throws(() => loadConfig({ env: { TETHER_TOKENS: 't=a', TETHER_PROVIDER: 'process' } }), /without isolation/);
  assert.equal(
    loadConfig({ env: { TETHER_TOKENS: 't=a', TETHER_PROVIDER: 'process', TETHER_ALLOW_PROCESS_PROVIDER: '1' } })
      .provider,
    'process',
  );
  assert.throws(() => loadConfig({ env: {} }), /no tokens/);
  assert.equal(loadConfig({ env: { TETHER_TOKENS: 't=a' } }).provider, 'docker');
});
