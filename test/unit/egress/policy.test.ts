import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  formatRule,
  isForbiddenAddress,
  narrow,
  parseRule,
  ruleAllows,
  tenantRules,
} from '../../../gateway/src/egress/policy';

test('rules: host:port and *.suffix:port, port 443 by default; IP literals and bare wildcards refused', () => {
  assert.deepEqual(parseRule('PyPI.org'), { host: 'pypi.org', wildcard: false, port: 443 });
  assert.deepEqual(parseRule('*.pythonhosted.org:8443'), { host: 'pythonhosted.org', wildcard: true, port: 8443 });
  assert.throws(() => parseRule('10.0.0.1:80'), /IP address/);
  assert.throws(() => parseRule('[::1]:80'), /IP address/);
  assert.throws(() => parseRule('*.org'), /too wide/);
  assert.throws(() => parseRule('a b:80'), /not a host name/);
  assert.throws(() => parseRule('x.org:70000'), /no valid port/);
});

test('matching: exact names, suffixes below the wildcard only, and the port', () => {
  const exact = parseRule('pypi.org:443');
  const wild = parseRule('*.pythonhosted.org:443');
  assert.ok(ruleAllows(exact, 'pypi.org', 443));
  assert.ok(ruleAllows(exact, 'PYPI.ORG.', 443));
  assert.ok(!ruleAllows(exact, 'pypi.org', 80));
  assert.ok(!ruleAllows(exact, 'evil-pypi.org', 443));
  assert.ok(ruleAllows(wild, 'files.pythonhosted.org', 443));
  assert.ok(!ruleAllows(wild, 'pythonhosted.org', 443));
  assert.ok(!ruleAllows(wild, 'files.pythonhosted.org.evil.com', 443));
  assert.ok(!ruleAllows(wild, 'xpythonhosted.org', 443));
});

test('narrowing: a run asks for a subset of the tenant list; empty takes the whole list', () => {
  const tenant = tenantRules({ '*': ['pypi.org'], alice: ['*.npmjs.org:443'] }, 'alice');
  assert.deepEqual(narrow(tenant, []).map(formatRule), ['pypi.org:443', '*.npmjs.org:443']);
  assert.deepEqual(narrow(tenant, ['registry.npmjs.org', '*.x.npmjs.org']).map(formatRule), [
    'registry.npmjs.org:443',
    '*.x.npmjs.org:443',
  ]);
  assert.throws(
    () => narrow(tenant, ['pypi.org:80']),
    /not within what this tenant may reach \(allowed hosts: pypi\.org:443, \*\.npmjs\.org:443\)/,
  );
  assert.throws(() => narrow(tenant, ['*.org:443']), /too wide/);
  assert.throws(() => narrow(tenant, ['npmjs.org']), /not within/);
  assert.throws(() => narrow(tenantRules({}, 'bob'), []), /allowed hosts: none/);
});

test('forbidden addresses: private, loopback, link-local (metadata), CGNAT, v6 forms; public ones pass', () => {
  for (const a of [
    '10.1.2.3',
    '127.0.0.1',
    '169.254.169.254',
    '172.16.0.1',
    '192.168.1.1',
    '100.64.0.1',
    '0.0.0.0',
    '224.0.0.1',
    '::1',
    '::',
    'fe80::1',
    'fd00::1',
    '::ffff:127.0.0.1',
    '::ffff:169.254.169.254',
    '64:ff9b::a00:1',
    'not-an-ip',
  ]) {
    assert.ok(isForbiddenAddress(a), a);
  }
  for (const a of ['151.101.0.223', '2a04:4e42::223', '8.8.8.8']) assert.ok(!isForbiddenAddress(a), a);
});
