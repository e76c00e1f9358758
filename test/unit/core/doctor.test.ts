import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultConfig } from '../../../gateway/src/config';
import { diagnose, formatReport } from '../../../gateway/src/doctor';

test('doctor: the process provider only warns that it isolates nothing, after the notes', async () => {
  const checks = await diagnose(
    { ...defaultConfig(), provider: 'process' },
    { notes: [{ name: 'config', status: 'ok', detail: 'built-in' }] },
  );
  assert.deepEqual(
    checks.map((c) => [c.name, c.status]),
    [
      ['config', 'ok'],
      ['provider', 'warn'],
    ],
  );
  assert.equal(
    formatReport(checks),
    [
      'ok    config        built-in',
      'warn  provider      process: tools run as local child processes WITHOUT any isolation',
      '                    → use the docker provider (the default) for anything but development',
      '',
      'ready: the gateway can create runs.',
    ].join('\n'),
  );
});
