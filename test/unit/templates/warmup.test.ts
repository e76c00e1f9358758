import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultConfig, type GatewayConfig } from '../../../gateway/src/config';
import { RunRecord, type RunSpec } from '../../../gateway/src/runs/RunRecord';
import { SNAPSHOT_TENANT } from '../../../gateway/src/templates/naming';
import { parseWarmup, type Warmup } from '../../../gateway/src/templates/warmup';
import { TemplateSnapshots, type TemplateSnapshotsDeps } from '../../../gateway/src/warmStarts/TemplateSnapshots';

test('a warm-up is checked whole: every problem named, at least one step, no path out of the workspace', () => {
  const ok = parseWarmup('{"commands":[["cp","-a","/opt/p/.","."]],"open":["src/a.ts"]}', 'warmup.json');
  assert.deepEqual(ok.open, ['src/a.ts']);
  assert.throws(() => parseWarmup('{', 'warmup.json'), /warmup.json: not JSON/);
  assert.throws(() => parseWarmup('{}', 'warmup.json'), /at least one of commands, open, eval/);
  assert.throws(() => parseWarmup('{"open":["../etc/passwd"]}', 'w'), /not a warm-up \(\/open\/0 /);
  assert.throws(() => parseWarmup('{"open":["/etc/passwd"]}', 'w'), /not a warm-up/);
  assert.throws(() => parseWarmup('{"commands":[[]],"extra":1}', 'w'), /\/commands\/0 .*; .*extra|extra.*; .*commands/);
  assert.throws(() => parseWarmup('{"eval":[{"language":"ruby","code":"1"}]}', 'w'), /\/eval\/0\/language/);
});

const spec = (template: string): RunSpec => ({
  conversationId: 'c',
  workspace: '',
  features: {
    lsp: true,
    ast: false,
    debug: false,
    eval: true,
    vibe: false,
    commands: false,
    questions: { enabled: false, targetSpace: '' },
  },
  approvals: { write: 'AUTO', exec: 'AUTO' },
  labels: {},
  limits: { memoryMb: 512, cpuMillis: 1000, pids: 256, diskMb: 256 },
  template,
});

/** A gateway's run machinery as far as the snapshots use it: records what was asked. */
function fakes(warmup: Warmup | undefined, config: GatewayConfig = defaultConfig()) {
  const created: { tenant: string; spec: RunSpec }[] = [];
  const forks: { parent: string; tenant: string; keepPaused?: boolean }[] = [];
  const deleted: string[] = [];
  let warmupFails = false;
  const left: RunRecord[] = [];
  const ready = (tenant: string, s: RunSpec) => {
    const r = new RunRecord(`run-${created.length}`, tenant, s, new Date());
    Object.defineProperty(r, 'state', { get: () => 'READY' });
    return r;
  };
  const deps = {
    config,
    lifecycle: {
      admitSpec: async (_tenant: string, s: RunSpec) => ({
        spec: s,
        image: s.template ? `img-${s.template}` : undefined,
      }),
      create: async (tenant: string, s: RunSpec) => {
        const run = ready(tenant, s);
        created.push({ tenant, spec: s });
        return run;
      },
      delete: async (_t: string, id: string) => void deleted.push(id),
      reportStarted: () => undefined,
    },
    pauses: {
      whenReady: async () => {
        if (warmupFails) throw new Error('the run went away');
        return { spec: spec('t'), runner: {} };
      },
      pause: async () => undefined,
      forkInto: async (parent: RunRecord, fs: RunRecord[], _n: string, o?: { keepPaused?: boolean }) => {
        forks.push({ parent: parent.runId, tenant: fs[0].tenant, keepPaused: o?.keepPaused });
        Object.defineProperty(fs[0], 'state', { get: () => 'READY' });
      },
    },
    registry: { find: () => undefined, all: () => left },
    templates: { warmupOf: async () => warmup },
    processes: { start: async () => 1 },
  } as unknown as TemplateSnapshotsDeps;
  return { deps, created, forks, deleted, left, failWarmup: () => (warmupFails = true) };
}

const settle = () => new Promise((r) => setTimeout(r, 20));

test('the first run of a template with a warm-up starts cold while the snapshot is made; the next is a fork of it', async () => {
  const f = fakes({ open: [] as string[], commands: [] as string[][] } as unknown as Warmup);
  const snapshots = new TemplateSnapshots(f.deps);
  const first = await snapshots.create('alice', spec('warm'));
  assert.match(first.startNote ?? '', /started cold: the snapshot of template warm is being made/);
  await settle();
  const made = f.created.findIndex((c) => c.tenant === SNAPSHOT_TENANT);
  assert.equal(f.created.length, 2);
  assert.notEqual(made, -1, "the snapshot is a run of the gateway's own");
  assert.equal(f.created[made].spec.features.commands, true, 'its warm-up may run commands');
  const second = await snapshots.create('alice', spec('warm'));
  assert.equal(second.start, 'template');
  assert.match(second.startNote ?? '', /^restored from the snapshot of template warm made at /);
  assert.deepEqual(f.forks, [{ parent: `run-${made}`, tenant: 'alice', keepPaused: true }]);
  // Another shape (other limits) is another snapshot.
  const other = await snapshots.create('alice', {
    ...spec('warm'),
    limits: { ...spec('warm').limits, memoryMb: 1024 },
  });
  assert.match(other.startNote ?? '', /being made/);
});

test('no warm-up, no note; a failed warm-up says why and its run is removed; past maxSnapshots runs start cold', async () => {
  const plain = fakes(undefined);
  const run = await new TemplateSnapshots(plain.deps).create('alice', spec('plain'));
  assert.equal(run.startNote, undefined);
  assert.equal(plain.created.length, 1);

  const failing = fakes({ open: ['a.ts'] } as Warmup);
  failing.failWarmup();
  const snapshots = new TemplateSnapshots(failing.deps);
  await snapshots.create('alice', spec('warm'));
  await settle();
  const next = await snapshots.create('alice', spec('warm'));
  assert.match(next.startNote ?? '', /could not be made: the run went away/);
  assert.equal(failing.deleted.length, 1, 'the failed snapshot run is removed');

  const none = fakes({ open: ['a.ts'] } as Warmup, {
    ...defaultConfig(),
    templates: { allowed: {}, maxSnapshots: 0 },
  });
  const cold = await new TemplateSnapshots(none.deps).create('alice', spec('warm'));
  assert.match(cold.startNote ?? '', /templates\.maxSnapshots/);
  assert.equal(none.created.length, 1, 'no snapshot run is made');
});

test('no token may name the snapshots tenant', () => {
  const f = fakes(undefined, { ...defaultConfig(), tokens: { t: SNAPSHOT_TENANT } });
  assert.throws(() => new TemplateSnapshots(f.deps), /no token may name it/);
});

test("snapshots an earlier gateway left are removed at start; tenants' runs are not", async () => {
  const f = fakes(undefined);
  f.left.push(new RunRecord('run-old', SNAPSHOT_TENANT, spec('warm'), new Date()));
  f.left.push(new RunRecord('run-alice', 'alice', spec('warm'), new Date()));
  assert.equal(await new TemplateSnapshots(f.deps).dropLeftovers(), 1);
  assert.deepEqual(f.deleted, ['run-old']);
});

test("a rebuilt template lets go of the old image's snapshot, so rebuilds never use up templates.maxSnapshots", async () => {
  const f = fakes({ open: [] as string[] } as unknown as Warmup, {
    ...defaultConfig(),
    templates: { allowed: {}, maxSnapshots: 1 },
  });
  let image = 'img-warm-1';
  f.deps.lifecycle.admitSpec = (async (_t: string, s: RunSpec) => ({ spec: s, image })) as never;
  const snapshots = new TemplateSnapshots(f.deps);
  await snapshots.create('alice', spec('warm'));
  await settle();
  assert.equal((await snapshots.create('alice', spec('warm'))).start, 'template');
  image = 'img-warm-2';
  const rebuilt = await snapshots.create('alice', spec('warm'));
  assert.match(rebuilt.startNote ?? '', /being made/, 'not refused by the cap: the old snapshot went');
  assert.equal(f.deleted.length, 1, "the old snapshot's run is removed");
  await settle();
  assert.equal((await snapshots.create('alice', spec('warm'))).start, 'template');
});
