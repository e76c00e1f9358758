import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type Run, RunStart, RunState } from '@tether/contract';
import { resultText, type TetherClient } from '@tether/client';
import { checkpointSupport } from '../../../gateway/src/sandbox/dockerCheckpoints';
import { templateBuilder } from '../../../gateway/src/sandbox/templateEngine';
import { startTestGateway, type TestGateway } from '../../helpers/gateway';
import { docker, dockerConfig, removeInstance } from '../docker/support';
import { buildWarmTemplate } from './warmTemplate';

/**
 * Runs that start warm from their template's snapshot, against the real engine and real
 * language servers: a template whose warm-up copies a real TypeScript project (@grpc/grpc-js's
 * sources) and a Python project into the workspace, opens a file of each until its server is
 * done loading, and sets a kernel variable. Under runc the snapshot is kept at portable depth
 * (workspace and kernel state: the servers start again), under runsc at memory depth (the
 * servers are the very processes the warm-up loaded). Either way the first run of the template
 * starts cold while its snapshot is made, saying so in GetRun, and a template rebuilt after its
 * snapshot is never served the old one.
 */
const TEMPLATE = 'warm';
const REPO = path.resolve(__dirname, '../../../..');
const features = { lsp: true, eval: true };

async function call(c: TetherClient, runId: string, tool: string, args: Record<string, unknown>) {
  const r = await c.callTool(runId, tool, args, { deadlineMs: 240_000 });
  return { text: resultText(r.result), isError: r.result.isError };
}

/** Creates runs of the template until one starts from its snapshot (each cold one removed). */
async function runFromSnapshot(c: TetherClient): Promise<Run> {
  const until = Date.now() + 480_000;
  for (;;) {
    const run = await c.createRun({ template: TEMPLATE, features });
    assert.equal(run.state, RunState.READY, run.error);
    if (run.start === RunStart.TEMPLATE) return run;
    assert.equal(run.start, RunStart.COLD);
    assert.match(run.startNote, /started cold: the snapshot of template warm is being made/);
    await c.deleteRun(run.runId);
    if (Date.now() > until) throw new Error('the snapshot was not made in 8 minutes');
    await new Promise((r) => setTimeout(r, 3000));
  }
}

for (const runtime of ['runc', 'runsc'] as const) {
  describe(`warm starts under ${runtime}`, () => {
    const instance = `warm-${runtime}-${process.pid}`;
    let t: TestGateway | undefined;
    let skip: string | false = false;

    before(async () => {
      if (runtime === 'runsc') {
        const support = await checkpointSupport(docker, runtime);
        if (!support.ok) {
          skip = support.why;
          return;
        }
      }
      const built = await buildWarmTemplate(TEMPLATE);
      console.error(`template ${built.tag}: ${built.built ? `built in ${built.seconds}s` : 'already built'}`);
      t = await startTestGateway({
        provider: 'docker',
        docker: { ...dockerConfig(), runtime },
        instance,
        stateDir: mkdtempSync(path.join(os.tmpdir(), 'tether-warm-')),
        templates: { allowed: { alice: [TEMPLATE] } },
        runs: { idlePauseSeconds: 0 },
      });
    });
    const variants: string[] = [];
    after(async () => {
      await t?.close();
      await removeInstance(instance);
      for (const tag of variants)
        await templateBuilder()
          .remove(tag)
          .catch(() => undefined);
    });

    test('the first run starts cold while the snapshot is made; the next start from it, warm, and answer on first call', async (ctx) => {
      if (skip || !t) return ctx.skip(skip || 'no gateway');
      const first = await t.alice.createRun({ template: TEMPLATE, features });
      assert.equal(first.state, RunState.READY, first.error);
      assert.equal(first.start, RunStart.COLD);
      assert.match(first.startNote, /the snapshot of template warm is being made/);
      await t.alice.deleteRun(first.runId);

      const run = await runFromSnapshot(t.alice);
      const depth = runtime === 'runsc' ? 'memory' : 'portable';
      assert.match(run.startNote, new RegExp(`restored from the snapshot of template warm .*at ${depth} depth`));
      // The snapshot's size: its checkpoint at memory depth (the servers' and kernel's pages).
      const mib = Number(/([\d.]+) MiB of state/.exec(run.startNote)?.[1]);
      if (depth === 'memory') assert.ok(mib > 50, run.startNote);
      assert.equal(run.forkedFrom, '', "the snapshot's run is the gateway's own");
      const got = await t.alice.getRun(run.runId);
      assert.equal(got.start, RunStart.TEMPLATE);
      assert.equal(got.startNote, run.startNote);
      assert.deepEqual(
        (await t.alice.listRuns()).map((r) => r.runId),
        [run.runId],
        "alice sees her run only, not the snapshot's",
      );

      const status = await call(t.alice, run.runId, 'lsp', { action: 'status' });
      if (depth === 'memory')
        // The language servers came with the snapshot: running before this run asked anything.
        assert.match(status.text, /^typescript \(TypeScript, JavaScript\): running/m, status.text);
      const hover = await call(t.alice, run.runId, 'lsp', {
        action: 'hover',
        file: 'src/client.ts',
        line: 38,
        symbol: 'Metadata',
      });
      assert.equal(hover.isError, false, hover.text);
      assert.match(hover.text, /class Metadata/);
      const refs = await call(t.alice, run.runId, 'lsp', {
        action: 'references',
        file: 'src/metadata.ts',
        line: 89,
        symbol: 'Metadata',
      });
      assert.equal(refs.isError, false, refs.text);
      // Across the project: the whole program is loaded (218 references in @grpc/grpc-js 1.14.7).
      assert.match(refs.text, /^showing 50 of \d{3} references/);
      for (const f of ['src/call-credentials.ts', 'src/client.ts', 'src/call.ts'])
        assert.match(refs.text, new RegExp(`^${f.replace('.', '\\.')}:\\d+: `, 'm'));
      const py = await call(t.alice, run.runId, 'lsp', {
        action: 'hover',
        file: 'py/geometry/main.py',
        line: 4,
        symbol: 'total_area',
      });
      assert.equal(py.isError, false, py.text);
      assert.match(py.text, /Sums the areas of the shapes/);
      const kept = await call(t.alice, run.runId, 'eval', {
        code: 'print(warmed)',
        description: 'print the variable the warm-up left behind',
      });
      assert.equal(kept.isError, false, kept.text);
      assert.match(kept.text, /\{"answer": 42\}/);

      // A second run from the same snapshot is its own: what one writes, the other does not see.
      const other = await t.alice.createRun({ template: TEMPLATE, features });
      assert.equal(other.start, RunStart.TEMPLATE, other.startNote);
      await call(t.alice, run.runId, 'eval', {
        code: 'warmed = "changed"',
        description: 'change the variable in this run only',
      });
      const theirs = await call(t.alice, other.runId, 'eval', {
        code: 'print(warmed)',
        description: 'print the variable in the other run',
      });
      assert.match(theirs.text, /\{"answer": 42\}/);
      await t.alice.deleteRun(other.runId);
      await t.alice.deleteRun(run.runId);
    });

    test('`tether template warm` has the gateway make the snapshot and prints its warm-up time and size', async (ctx) => {
      if (skip || !t) return ctx.skip(skip || 'no gateway');
      // Not execFileSync: the gateway answering it runs in this process.
      const { stdout: out } = await promisify(execFile)(
        process.execPath,
        [path.join(REPO, 'bin/tether'), 'template', 'warm', TEMPLATE, '--features', 'lsp,eval'],
        { env: { ...process.env, TETHER_ADDRESS: t.gateway.address, TETHER_TOKEN: 'token-alice' }, encoding: 'utf8' },
      );
      assert.match(
        out,
        /^warm: restored from the snapshot of template warm made at .* \(warm-up \d+ ms, [\d.]+ MiB of state\)/,
      );
      assert.deepEqual(await t.alice.listRuns(), [], 'the runs it made are gone');
    });

    test('a template rebuilt after its snapshot is not served the old snapshot', async (ctx) => {
      if (skip || !t) return ctx.skip(skip || 'no gateway');
      const rebuilt = await buildWarmTemplate(TEMPLATE, `changed under ${runtime} ${process.pid}`);
      assert.equal(rebuilt.built, true);
      variants.push(rebuilt.tag);
      // The catalog looks the template's image up again after its cache of 5 s.
      await new Promise((r) => setTimeout(r, 5500));
      const run = await t.alice.createRun({ template: TEMPLATE, features });
      assert.equal(run.state, RunState.READY, run.error);
      assert.equal(run.start, RunStart.COLD, run.startNote);
      assert.match(run.startNote, /being made/);
      await t.alice.deleteRun(run.runId);
      // The new snapshot is of the new image: its warm-up copied the changed project.
      const warm = await runFromSnapshot(t.alice);
      const read = await call(t.alice, warm.runId, 'read', { path: 'VARIANT' });
      assert.equal(read.isError, false, read.text);
      assert.match(read.text, new RegExp(`changed under ${runtime}`));
      await t.alice.deleteRun(warm.runId);
    });
  });
}
