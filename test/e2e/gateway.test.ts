import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { promises as fs, readdirSync, symlinkSync } from 'node:fs';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import * as tarStream from 'tar-stream';
import { AgentKind, Approval, RunState, SurfaceMode, Tier, type Run } from '@tether/contract';
import { resultText, tarOf, TetherClient } from '../../clients/typescript/src';
import { startTestGateway, type TestGateway } from '../helpers/gateway';

const PLAN = { mode: SurfaceMode.PLAN, agent: AgentKind.MAIN };
const SUBAGENT = { mode: SurfaceMode.DEFAULT, agent: AgentKind.READ_ONLY_SUBAGENT };

function code(err: unknown): number {
  return (err as grpc.ServiceError).code;
}

/** The runner's pid, found by the run id in its environment (the process provider sets it). */
async function runnerPid(runId: string): Promise<number> {
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    const env = await fs.readFile(`/proc/${pid}/environ`, 'utf8').catch(() => '');
    if (env.split('\0').includes(`TETHER_RUN_ID=${runId}`)) return Number(pid);
  }
  throw new Error(`no runner process for ${runId}`);
}

async function untar(buf: Buffer): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const ex = tarStream.extract();
  const done = new Promise<void>((resolve, reject) => {
    ex.on('entry', (h, s, next) => {
      const chunks: Buffer[] = [];
      s.on('data', (c: unknown) => void chunks.push(c as Buffer));
      s.on('end', () => {
        if (h.type === 'file') out[h.name] = Buffer.concat(chunks).toString();
        next();
      });
    });
    ex.on('finish', resolve);
    ex.on('error', reject);
  });
  ex.end(buf);
  await done;
  return out;
}

describe('gateway end to end through the process provider', () => {
  let t: TestGateway;
  let run: Run;

  before(async () => {
    t = await startTestGateway({
      provider: 'process',
      maxMessageBytes: 16 * 1024 * 1024,
      maxPutFilesBytes: 1024 * 1024,
    });
    run = await t.alice.createRun({ conversationId: 'conv-1', labels: { team: 'e2e' } });
    assert.equal(run.state, RunState.READY, run.error);
  });
  after(async () => t.close());

  test('health checking and server reflection answer', async () => {
    const health = protoLoader.loadSync(require.resolve('grpc-health-check/proto/health/v1/health.proto'), {
      enums: String,
    });
    const Health = (grpc.loadPackageDefinition(health) as any).grpc.health.v1.Health;
    const hc = new Health(t.gateway.address, grpc.credentials.createInsecure());
    const res = await new Promise<any>((resolve, reject) =>
      hc.check({ service: 'tether.v1.Gateway' }, (e: unknown, r: unknown) => (e ? reject(e) : resolve(r))),
    );
    assert.equal(res.status, 'SERVING');
    hc.close();

    const refl = protoLoader.loadSync(
      path.join(
        path.dirname(require.resolve('@grpc/reflection/package.json')),
        'build/proto/grpc/reflection/v1alpha/reflection.proto',
      ),
    );
    const R = (grpc.loadPackageDefinition(refl) as any).grpc.reflection.v1alpha.ServerReflection;
    const rc = new R(t.gateway.address, grpc.credentials.createInsecure());
    const stream = rc.serverReflectionInfo();
    const names = await new Promise<string[]>((resolve, reject) => {
      stream.on('data', (m: any) => resolve(m.listServicesResponse.service.map((s: any) => s.name)));
      stream.on('error', reject);
      stream.write({ listServices: '' });
    });
    stream.end();
    rc.close();
    assert.ok(names.includes('tether.v1.Gateway'), names.join(','));
  });

  test('no token and a bad token are UNAUTHENTICATED', async () => {
    const anon = new TetherClient(t.gateway.address, '');
    await assert.rejects(anon.listRuns(), (e) => code(e) === grpc.status.UNAUTHENTICATED);
    anon.close();
    const wrong = t.client('not-a-token');
    await assert.rejects(wrong.getRun(run.runId), (e) => code(e) === grpc.status.UNAUTHENTICATED);
    await assert.rejects(
      wrong.callTool(run.runId, 'read', { path: 'x' }),
      (e) => code(e) === grpc.status.UNAUTHENTICATED,
    );
  });

  test("another tenant's run is NOT_FOUND, exactly like a run that does not exist", async () => {
    const theirs = await t.bob.getRun(run.runId).catch((e) => e as grpc.ServiceError);
    const none = await t.bob.getRun('run-does-not-exist').catch((e) => e as grpc.ServiceError);
    assert.equal((theirs as grpc.ServiceError).code, grpc.status.NOT_FOUND);
    assert.equal(
      (theirs as grpc.ServiceError).details.replace(run.runId, 'ID'),
      (none as grpc.ServiceError).details.replace('run-does-not-exist', 'ID'),
    );
    await assert.rejects(t.bob.callTool(run.runId, 'read', { path: 'a' }), (e) => code(e) === grpc.status.NOT_FOUND);
    await assert.rejects(t.bob.deleteRun(run.runId), (e) => code(e) === grpc.status.NOT_FOUND);
    await assert.rejects(t.bob.listTools(run.runId), (e) => code(e) === grpc.status.NOT_FOUND);
    await assert.rejects(t.bob.putFileMap(run.runId, { 'x.txt': 'x' }), (e) => code(e) === grpc.status.NOT_FOUND);
    assert.deepEqual(
      (await t.bob.listRuns()).map((r) => r.runId),
      [],
    );
    assert.ok((await t.alice.listRuns()).some((r) => r.runId === run.runId));
  });

  test('tools by surface: plan mode and read-only subagents see only the read tier', async () => {
    const all = await t.alice.listTools(run.runId);
    assert.deepEqual(all.map((x) => x.name).sort(), ['apply_patch', 'edit', 'read', 'write']);
    const read = all.find((x) => x.name === 'read')!;
    assert.equal(read.tier, Tier.READ);
    assert.equal(read.parallelSafe, true);
    assert.deepEqual(JSON.parse(read.inputSchemaJson).required, ['path']);
    for (const surface of [PLAN, SUBAGENT]) {
      const tools = await t.alice.listTools(run.runId, surface);
      assert.deepEqual(
        tools.map((x) => x.name),
        ['read'],
      );
      assert.ok(tools.every((x) => x.tier === Tier.READ));
    }
  });

  test('a tool outside the surface is answered exactly as a tool that does not exist', async () => {
    const hidden = await t.alice
      .callTool(run.runId, 'write', { path: 'p.txt', content: 'x' }, { surface: PLAN })
      .catch((e) => e as grpc.ServiceError);
    const absent = await t.alice
      .callTool(run.runId, 'nonexistent', { path: 'p.txt', content: 'x' })
      .catch((e) => e as grpc.ServiceError);
    assert.equal((hidden as grpc.ServiceError).code, grpc.status.NOT_FOUND);
    assert.equal((absent as grpc.ServiceError).code, grpc.status.NOT_FOUND);
    assert.equal(
      (hidden as grpc.ServiceError).details.replace('write', 'X'),
      (absent as grpc.ServiceError).details.replace('nonexistent', 'X'),
    );
  });

  test('write then read through gRPC, and the file arrives via GetFiles', async () => {
    const w = await t.alice.callTool(run.runId, 'write', { path: 'src/hello.py', content: 'print("hi")\n' });
    assert.equal(w.result.isError, false, resultText(w.result));
    const r = await t.alice.callTool(run.runId, 'read', { path: 'src/hello.py' });
    assert.match(resultText(r.result), /1\tprint\("hi"\)/);
    assert.equal(JSON.parse(r.result.structuredJson).content, 'print("hi")\n');
    const files = await untar(await t.alice.getFiles(run.runId, 'src'));
    assert.equal(files['src/hello.py'], 'print("hi")\n');
  });

  test('PutFiles unpacks a tar; entries that leave the workspace are refused', async () => {
    const res = await t.alice.putFileMap(run.runId, { 'a/one.txt': '1\n', 'a/two.txt': '2\n' });
    assert.equal(res.filesWritten, 2);
    assert.match(resultText((await t.alice.callTool(run.runId, 'read', { path: 'a/two.txt' })).result), /2/);

    const evil = tarStream.pack();
    evil.entry({ name: 'good-first.txt' }, 'fine');
    evil.entry({ name: '../../escape.txt' }, 'x');
    evil.finalize();
    const chunks: Buffer[] = [];
    for await (const c of evil) chunks.push(c as Buffer);
    await assert.rejects(
      t.alice.putFiles(run.runId, Buffer.concat(chunks)),
      (e) => code(e) === grpc.status.INVALID_ARGUMENT && /leaves the workspace/.test((e as grpc.ServiceError).details),
    );
    // All or nothing: the good entry before the bad one was not applied either.
    assert.equal((await t.alice.callTool(run.runId, 'read', { path: 'good-first.txt' })).result.isError, true);

    const link = tarStream.pack();
    link.entry({ name: 'root', type: 'symlink', linkname: '/' });
    link.finalize();
    const lc: Buffer[] = [];
    for await (const c of link) lc.push(c as Buffer);
    await assert.rejects(
      t.alice.putFiles(run.runId, Buffer.concat(lc)),
      (e) =>
        code(e) === grpc.status.INVALID_ARGUMENT && /link refused: root -> \//.test((e as grpc.ServiceError).details),
    );
    await assert.rejects(
      t.alice.putFiles(run.runId, await tarOf({ 'x.txt': 'x' }), '../up'),
      (e) => code(e) === grpc.status.INVALID_ARGUMENT,
    );
    // An archive over the limit is refused while it streams, and nothing of it lands.
    const huge = await tarOf({ 'huge-1.bin': Buffer.alloc(700 * 1024, 1), 'huge-2.bin': Buffer.alloc(700 * 1024, 2) });
    await assert.rejects(
      t.alice.putFiles(run.runId, huge),
      (e) => code(e) === grpc.status.RESOURCE_EXHAUSTED && /limit/.test((e as grpc.ServiceError).details),
    );
    assert.equal((await t.alice.callTool(run.runId, 'read', { path: 'huge-1.bin' })).result.isError, true);
  });

  test('bad arguments are tool results naming each field, and never reach the runner', async () => {
    const malformed = await t.alice.callTool(run.runId, 'read', '{"path": ');
    assert.equal(malformed.result.isError, true);
    assert.match(resultText(malformed.result), /not valid JSON/);
    const missing = await t.alice.callTool(run.runId, 'write', { path: 'x.txt' });
    assert.match(resultText(missing.result), /missing required argument "content"/);
    const wrongType = await t.alice.callTool(run.runId, 'read', { path: 'x.txt', start_line: 'ten' });
    assert.match(resultText(wrongType.result), /"start_line" must be integer/);
    const escaped = await t.alice.callTool(run.runId, 'read', { path: '../../etc/passwd' });
    assert.equal(escaped.result.isError, true);
    assert.match(resultText(escaped.result), /escapes the workspace/);
  });

  test('a symlink to / inside the workspace does not lead out of it', async () => {
    const ws = t.gateway.runs.get('alice', run.runId).sandbox!.workspacePath;
    symlinkSync('/', path.join(ws, 'slash'));
    const r = await t.alice.callTool(run.runId, 'read', { path: 'slash/etc/passwd' });
    assert.equal(r.result.isError, true);
    assert.match(resultText(r.result), /outside the workspace/);
    const w = await t.alice.callTool(run.runId, 'write', { path: 'slash/tmp/tether-owned', content: 'x' });
    assert.equal(w.result.isError, true);
    await assert.rejects(fs.access('/tmp/tether-owned'));
  });

  test('a patch whose context does not match changes nothing', async () => {
    await t.alice.callTool(run.runId, 'write', { path: 'p/a.txt', content: 'alpha\nbeta\n' });
    const r = await t.alice.callTool(run.runId, 'apply_patch', {
      patch:
        '*** Begin Patch\n*** Update File: p/a.txt\n@@\n-alpha\n+ALPHA\n*** Update File: p/a.txt\n@@\n-gamma\n+x\n*** End Patch',
    });
    assert.equal(r.result.isError, true);
    assert.match(resultText(r.result), /no file changed/);
    assert.match(resultText((await t.alice.callTool(run.runId, 'read', { path: 'p/a.txt' })).result), /alpha/);
  });

  test('a 50 MB argument is refused cleanly and the gateway lives on', async () => {
    const big = 'x'.repeat(50 * 1024 * 1024);
    await assert.rejects(
      t.alice.callTool(run.runId, 'write', { path: 'big.txt', content: big }),
      (e) => code(e) === grpc.status.RESOURCE_EXHAUSTED,
    );
    const r = await t.alice.callTool(run.runId, 'read', { path: 'src/hello.py' });
    assert.equal(r.result.isError, false);
    await assert.rejects(
      fs.access(path.join(t.gateway.runs.get('alice', run.runId).sandbox!.workspacePath, 'big.txt')),
    );
  });

  test('CreateRun input is checked: questions need a target space, limits their maximum, workspaces an allowed root', async () => {
    await assert.rejects(
      t.alice.createRun({ features: { questions: { enabled: true } } }),
      (e) => code(e) === grpc.status.INVALID_ARGUMENT && /target_space/.test((e as grpc.ServiceError).details),
    );
    await assert.rejects(
      t.alice.createRun({ limits: { memoryMb: 10 ** 6 } }),
      (e) => code(e) === grpc.status.INVALID_ARGUMENT && /maximum/.test((e as grpc.ServiceError).details),
    );
    await assert.rejects(t.alice.createRun({ workspace: '/etc' }), (e) => code(e) === grpc.status.PERMISSION_DENIED);
    await assert.rejects(
      t.alice.createRun({ labels: { 'dev.tether.run-id': 'x' } }),
      (e) => code(e) === grpc.status.INVALID_ARGUMENT,
    );
  });

  test('a cancel while the call waits for approval ends it with a clear refusal', async () => {
    const gated = await t.alice.createRun({ approvals: { write: Approval.PROMPT, exec: Approval.PROMPT } });
    const ac = new AbortController();
    const out = await t.alice.callTool(
      gated.runId,
      'write',
      { path: 'c.txt', content: 'x' },
      {
        signal: ac.signal,
        onQuestion: () => {
          ac.abort('changed my mind');
          return new Promise(() => undefined);
        },
      },
    );
    assert.equal(out.result.isError, true);
    assert.match(resultText(out.result), /not approved \(changed my mind\)/);
    await assert.rejects(
      fs.access(path.join(t.gateway.runs.get('alice', gated.runId).sandbox!.workspacePath, 'c.txt')),
    );
    await t.alice.deleteRun(gated.runId);
  });

  test('the runner killed mid-call: UNAVAILABLE at once, the run FAILED with the reason, the gateway lives on', async () => {
    const victim = await t.alice.createRun({ approvals: { write: Approval.PROMPT } });
    await t.alice.putFileMap(victim.runId, { 'kept.txt': 'saved before the crash\n' });
    const pid = await runnerPid(victim.runId);
    const started = Date.now();
    const err = await t.alice
      .callTool(
        victim.runId,
        'write',
        { path: 'k.txt', content: 'x' },
        {
          onQuestion: async () => {
            process.kill(pid, 'SIGKILL');
            await new Promise((r) => setTimeout(r, 200));
            return { approved: true };
          },
        },
      )
      .catch((e) => e as grpc.ServiceError);
    assert.equal((err as grpc.ServiceError).code, grpc.status.UNAVAILABLE, String(err));
    assert.ok(Date.now() - started < 5000);
    let failed = await t.alice.getRun(victim.runId);
    // The call ends as its connection drops; the run is FAILED, with the sandbox's own exit
    // reason, once the runner's exit is seen, within moments.
    for (let i = 0; i < 50 && !/SIGKILL/.test(failed.error); i++) {
      await new Promise((r) => setTimeout(r, 100));
      failed = await t.alice.getRun(victim.runId);
    }
    assert.equal(failed.state, RunState.FAILED);
    assert.match(failed.error, /SIGKILL/);
    await assert.rejects(
      t.alice.callTool(victim.runId, 'read', { path: 'x' }),
      (e) => code(e) === grpc.status.FAILED_PRECONDITION,
    );
    // The failed run's work is not lost: its workspace can still be fetched until DeleteRun.
    assert.deepEqual(await untar(await t.alice.getFiles(victim.runId, 'kept.txt')), {
      'kept.txt': 'saved before the crash\n',
    });
    assert.equal((await t.alice.callTool(run.runId, 'read', { path: 'src/hello.py' })).result.isError, false);
    await t.alice.deleteRun(victim.runId);
  });

  test('the runner killed while a call waits inside it: UNAVAILABLE at once', async () => {
    const victim = await t.alice.createRun({ features: { questions: { enabled: true, targetSpace: 'e2e' } } });
    const pid = await runnerPid(victim.runId);
    const started = Date.now();
    const err = await t.alice
      .callTool(
        victim.runId,
        'ask_user',
        { question: 'Proceed?', options: [{ label: 'yes' }, { label: 'no' }] },
        {
          // The card is on screen, so the call is inside the runner's ask_user; nobody answers.
          onQuestion: () => {
            process.kill(pid, 'SIGKILL');
            return new Promise(() => undefined);
          },
        },
      )
      .catch((e) => e as grpc.ServiceError);
    assert.equal((err as grpc.ServiceError).code, grpc.status.UNAVAILABLE, String(err));
    assert.ok(Date.now() - started < 5000, `took ${Date.now() - started} ms`);
    // The call ends as its connection drops; the run is FAILED once the runner's exit is seen.
    let state = (await t.alice.getRun(victim.runId)).state;
    for (let i = 0; i < 50 && state !== RunState.FAILED; i++) {
      await new Promise((r) => setTimeout(r, 100));
      state = (await t.alice.getRun(victim.runId)).state;
    }
    assert.equal(state, RunState.FAILED);
    await t.alice.deleteRun(victim.runId);
  });

  test('a cancel while a call waits inside the runner ends it with a clear error', async () => {
    const r = await t.alice.createRun({ features: { questions: { enabled: true, targetSpace: 'e2e' } } });
    const ac = new AbortController();
    const out = await t.alice.callTool(
      r.runId,
      'ask_user',
      { question: 'Proceed?' },
      {
        signal: ac.signal,
        onQuestion: () => {
          ac.abort('user left');
          return new Promise(() => undefined);
        },
      },
    );
    assert.equal(out.result.isError, true);
    assert.match(resultText(out.result), /user left|cancel/i);
    // The run is fine afterwards.
    assert.equal((await t.alice.callTool(r.runId, 'read', { path: '.' })).result.isError, false);
    await t.alice.deleteRun(r.runId);
  });

  test('DeleteRun removes the run and its workspace', async () => {
    const r = await t.alice.createRun({});
    const ws = t.gateway.runs.get('alice', r.runId).sandbox!.workspacePath;
    await t.alice.putFileMap(r.runId, { 'f.txt': 'x' });
    await t.alice.deleteRun(r.runId);
    await assert.rejects(t.alice.getRun(r.runId), (e) => code(e) === grpc.status.NOT_FOUND);
    await assert.rejects(fs.access(ws));
  });
});
