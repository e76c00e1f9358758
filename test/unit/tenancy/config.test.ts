import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { loadConfig } from '../../../gateway/src/config';
import { policyFor } from '../../../gateway/src/tenancy/config';

const dir = mkdtempSync(path.join(os.tmpdir(), 'tenancy-config-'));
const env = { TETHER_TOKENS: 'ta=acme,tb=bravo' };

/** Loads a config file with these contents, the way `tether serve --config` does. */
function load(doc: unknown) {
  const file = path.join(dir, `c${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(file, JSON.stringify(doc));
  return loadConfig({ file, env });
}

test('a valid tenancy section loads, per-tenant values over the default', () => {
  const cfg = load({
    runs: { maxPerTenant: 9 },
    limits: { default: { diskMb: 512 }, max: { diskMb: 4096 } },
    tenancy: {
      default: { memoryMb: 8192, callTool: { perSecond: 100, burst: 200 } },
      tenants: { acme: { liveRuns: 3, diskMb: 1024, callTool: { burst: 20 } } },
      admission: { concurrency: 2 },
    },
  });
  assert.equal(cfg.limits.default.diskMb, 512);
  assert.equal(cfg.limits.default.memoryMb, 2048, 'the rest of limits.default keeps its defaults');
  const acme = policyFor(cfg.tenancy, 'acme', cfg.runs.maxPerTenant);
  const bravo = policyFor(cfg.tenancy, 'bravo', cfg.runs.maxPerTenant);
  assert.deepEqual(
    [acme.liveRuns, acme.memoryMb, acme.diskMb, acme.callTool.perSecond, acme.callTool.burst],
    [3, 8192, 1024, 100, 20],
  );
  assert.deepEqual([bravo.liveRuns, bravo.diskMb], [9, 50 * 2048]);
  assert.equal(cfg.tenancy.admission.concurrency, 2);
});

test('negative, zero and fractional values are refused at start, naming the key', () => {
  const cases: [unknown, RegExp][] = [
    [{ tenancy: { default: { memoryMb: -1 } } }, /\/tenancy\/default\/memoryMb must be >= 1/],
    [{ tenancy: { default: { liveRuns: 0 } } }, /\/tenancy\/default\/liveRuns must be >= 1/],
    [{ tenancy: { tenants: { acme: { diskMb: 0 } } } }, /\/tenancy\/tenants\/acme\/diskMb must be >= 1/],
    [
      { tenancy: { tenants: { acme: { callTool: { perSecond: 0 } } } } },
      /\/tenancy\/tenants\/acme\/callTool\/perSecond must be > 0/,
    ],
    [{ tenancy: { default: { createRun: { burst: 0.5 } } } }, /\/tenancy\/default\/createRun\/burst must be integer/],
    [{ tenancy: { default: { queuedCreates: -3 } } }, /\/tenancy\/default\/queuedCreates must be >= 0/],
    [{ tenancy: { admission: { concurrency: 0 } } }, /\/tenancy\/admission\/concurrency must be >= 1/],
    [{ limits: { default: { diskMb: 0 } } }, /\/limits\/default\/diskMb must be >= 16/],
    [{ limits: { max: { diskMb: -1024 } } }, /\/limits\/max\/diskMb must be >= 16/],
  ];
  for (const [doc, why] of cases) assert.throws(() => load(doc), why, JSON.stringify(doc));
});

test('unknown keys and unknown tenants are refused at start, naming them', () => {
  assert.throws(
    () => load({ tenancy: { tenants: { acme: { memoryMB: 10 } } } }),
    /\/tenancy\/tenants\/acme\/memoryMB is not a known key/,
  );
  assert.throws(
    () => load({ tenancy: { default: { callTool: { rate: 5 } } } }),
    /\/tenancy\/default\/callTool\/rate is not a known key/,
  );
  assert.throws(() => load({ tenancy: { quotas: {} } }), /\/tenancy\/quotas is not a known key/);
  assert.throws(
    () => load({ tenancy: { tenants: { acmee: { liveRuns: 2 } } } }),
    /tenancy\.tenants\.acmee: no token maps to tenant "acmee" \(known tenants: acme, bravo\)/,
  );
  assert.throws(() => load({ docker: { disk: 'xfs' } }), /\/docker\/disk must be one of loop, none/);
});
