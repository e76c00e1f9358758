import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, realpathSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Workspace } from '../../../runner/src/workspace';
import { DiagnosticsOnWrite } from '../../../runner/src/tools/lsp/diagnosticsOnWrite';
import { DiagnosticsLedger } from '../../../runner/src/tools/lsp/ledger';
import { DEFAULT_LSP_SETTINGS, LspSession, type LspSettings } from '../../../runner/src/tools/lsp/session';
import type { ServerSpec } from '../../../runner/src/tools/lsp/servers';
import { FAKE_SERVER } from './fakeServerSpec';
import type { Placement } from '../../../runner/src/tools/lsp/supervisor';
import { StartingProcesses } from '../../../runner/src/startups';
import { HoverRequest } from 'vscode-languageserver-protocol';
import { pathToFileURL } from 'node:url';

const FAKE: ServerSpec = { ...FAKE_SERVER, diagnostics: 'versioned-push' };

function session(settings: Partial<LspSettings>, env: Record<string, string> = {}) {
  const root = realpathSync(mkdtempSync(path.join(os.tmpdir(), 'lsp-fake-')));
  writeFileSync(path.join(root, 'fake.json'), '{}');
  writeFileSync(path.join(root, 'a.fake'), 'fine\n');
  // The supervisor hands its own environment to servers it starts.
  for (const k of ['FAKE_PROGRESS_MS', 'FAKE_PUBLISH']) delete process.env[k];
  Object.assign(process.env, env, { PATH: `${path.dirname(process.execPath)}${path.delimiter}${process.env.PATH}` });
  const s = new LspSession(new Workspace(root), { ...DEFAULT_LSP_SETTINGS, progressGraceMs: 50, ...settings }, [FAKE]);
  return { s, root, file: path.join(root, 'a.fake') };
}

async function placed(s: LspSession, file: string): Promise<Extract<Placement, { ok: true }>> {
  const p = await s.supervisor.place(file);
  assert.ok(p.ok, JSON.stringify(p));
  return p;
}

test('readiness waits for indexing progress to end', async () => {
  const { s, file } = session({ readyTimeoutMs: 5000 }, { FAKE_PROGRESS_MS: '300' });
  const t0 = Date.now();
  const h = await s.supervisor.ensure(await placed(s, file));
  assert.ok(Date.now() - t0 >= 280, 'returned before the progress ended');
  assert.equal(h.readyNote, undefined);
  await s.supervisor.stopAll();
});

test('the readiness bound is kept, and said', async () => {
  // The bound also covers starting the server, so it is wide enough for a slow start on a busy machine.
  const { s, file } = session({ readyTimeoutMs: 3000 }, { FAKE_PROGRESS_MS: '30000' });
  const t0 = Date.now();
  const h = await s.supervisor.ensure(await placed(s, file));
  assert.ok(Date.now() - t0 < 10_000);
  assert.match(h.readyNote ?? '', /fake was still busy \(indexing\) after 3000 ms; answers may be incomplete/);
  await s.supervisor.stopAll();
});

test('a crashed server is restarted on the next call and the crash is kept for status', async () => {
  const { s, file } = session({});
  const first = await s.supervisor.ensure(await placed(s, file));
  const pid = first.client.pid!;
  process.kill(pid, 'SIGKILL');
  await new Promise<void>((r) => first.client.once('exit', () => r()));
  const second = await s.supervisor.ensure(await placed(s, file));
  assert.notEqual(second.client.pid, pid);
  const [st] = await s.supervisor.status();
  assert.equal(st.running.length, 1);
  assert.equal(st.crashes[0].count, 1);
  assert.equal(st.crashes[0].last.signal, 'SIGKILL');
  await s.supervisor.stopAll();
  const [after] = await s.supervisor.status();
  assert.equal(after.crashes[0].count, 1, 'an orderly stop is not a crash');
});

test('an idle server is stopped after the configured time, without counting as a crash', async () => {
  const { s, file } = session({ idleStopMs: 200 });
  const h = await s.supervisor.ensure(await placed(s, file));
  await new Promise<void>((r) => h.client.once('exit', () => r()));
  const [st] = await s.supervisor.status();
  assert.deepEqual([st.running.length, st.crashes.length], [0, 0]);
});

test('a call right after an idle stop starts a new server; the old one exiting is not a crash', async () => {
  const { s, file } = session({ idleStopMs: 300 });
  const old = await s.supervisor.ensure(await placed(s, file));
  while (s.supervisor.running().length > 0) await new Promise((r) => setTimeout(r, 10));
  const exited = new Promise<void>((r) => (old.client.alive ? old.client.once('exit', () => r()) : r()));
  const fresh = await s.supervisor.ensure(await placed(s, file));
  await exited;
  assert.notEqual(fresh.client.pid, old.client.pid);
  const [st] = await s.supervisor.status();
  assert.deepEqual([st.running.length, st.crashes.length], [1, 0]);
  await s.supervisor.stopAll();
});

test('diagnostics on write: new ones once; a server that never publishes costs only the bound', async () => {
  const { s, file } = session({ writeDiagnosticsTimeoutMs: 2000 });
  const wrap = new DiagnosticsOnWrite(s, new DiagnosticsLedger());
  writeFileSync(file, 'fine\nBAD\n');
  const [first] = await wrap.afterWrite([file]);
  assert.match(
    first.type === 'text' ? first.text : '',
    /new diagnostics in a\.fake \(fake\):\na\.fake:2:1: error \[bad\] BAD is not allowed/,
  );
  writeFileSync(file, 'fine\n\n\nBAD\n');
  assert.deepEqual(await wrap.afterWrite([file]), []);
  await s.supervisor.stopAll();

  const hung = session({ writeDiagnosticsTimeoutMs: 300 }, { FAKE_PUBLISH: 'never' });
  const hungWrap = new DiagnosticsOnWrite(hung.s, new DiagnosticsLedger());
  await hung.s.supervisor.ensure(await placed(hung.s, hung.file));
  writeFileSync(hung.file, 'BAD\n');
  const t0 = Date.now();
  const [note] = await hungWrap.afterWrite([hung.file]);
  assert.ok(Date.now() - t0 < 1500);
  assert.match(
    note.type === 'text' ? note.text : '',
    /diagnostics not checked for a\.fake: fake sent none within 300 ms \(the write is done\)/,
  );
  await hung.s.supervisor.stopAll();
});

test('a file no server handles is simply written', async () => {
  const { s, root } = session({});
  writeFileSync(path.join(root, 'notes.txt'), 'x');
  assert.deepEqual(
    await new DiagnosticsOnWrite(s, new DiagnosticsLedger()).afterWrite([path.join(root, 'notes.txt')]),
    [],
  );
});

test('the lifecycle hears each start and exit: a crash restart, a reload restart, an idle stop', async () => {
  const { s, file } = session({});
  const heard: string[] = [];
  s.supervisor.lifecycle = {
    started: (name, restart) => void heard.push(`start ${name}${restart ? ` ${restart}` : ''}`),
    stopped: (name) => void heard.push(`stop ${name}`),
  };
  const first = await s.supervisor.ensure(await placed(s, file));
  process.kill(first.client.pid!, 'SIGKILL');
  await new Promise<void>((r) => first.client.once('exit', () => r()));
  await s.supervisor.ensure(await placed(s, file));
  await s.supervisor.reload();
  await s.supervisor.ensure(await placed(s, file));
  await s.supervisor.stopAll();
  await new Promise((r) => setTimeout(r, 50));
  const id = FAKE.id;
  assert.deepEqual(heard, [
    `start ${id}`,
    `stop ${id}`,
    `start ${id} crash`,
    `stop ${id}`,
    `start ${id} request`,
    `stop ${id}`,
  ]);
});

/** The supervisor of a session, telling a run's starting processes; background work logged. */
function withStartups(settings: Partial<LspSettings>, env: Record<string, string> = {}) {
  const f = session(settings, env);
  const startups = new StartingProcesses();
  const log: string[] = [];
  startups.observe({ hold: () => log.push('hold'), release: () => log.push('release') });
  f.s.supervisor.startups = startups;
  return { ...f, startups, log };
}

test("a starting server holds the run's background work from its spawn to its first diagnostics", async () => {
  const { s, file, startups, log } = withStartups({});
  const h = await s.supervisor.ensure(await placed(s, file));
  assert.deepEqual(startups.holding, ['fake'], 'up to initialize, still starting');
  assert.deepEqual(log, ['hold']);
  const synced = await s.sync(file, undefined, 'BAD\n');
  assert.ok(await s.diagnosticsOf(synced, 5000));
  assert.deepEqual(startups.holding, []);
  assert.deepEqual(log, ['hold', 'release']);
  assert.equal(startups.history[0].how, 'diagnostics');
  // A server already running holds nothing.
  await s.supervisor.ensure(await placed(s, file));
  assert.equal(startups.history.length, 1);
  assert.equal(h.client.alive, true);
  await s.supervisor.stopAll();
});

test('a server that publishes nothing is up at its first answer, or shortly after it is ready; one that dies, at once', async () => {
  const asked = withStartups({}, { FAKE_PUBLISH: 'never' });
  asked.s.supervisor.startedAfterReadyMs = 60_000;
  const h0 = await asked.s.supervisor.ensure(await placed(asked.s, asked.file));
  assert.deepEqual(asked.startups.holding, ['fake']);
  await h0.client.request(HoverRequest.type, {
    textDocument: { uri: pathToFileURL(asked.file).href },
    position: { line: 0, character: 0 },
  });
  assert.deepEqual(asked.startups.holding, []);
  assert.equal(asked.startups.history[0].how, 'answered');
  await asked.s.supervisor.stopAll();

  const quiet = withStartups({}, { FAKE_PUBLISH: 'never' });
  quiet.s.supervisor.startedAfterReadyMs = 200;
  const t0 = Date.now();
  await quiet.s.supervisor.ensure(await placed(quiet.s, quiet.file));
  assert.deepEqual(quiet.startups.holding, ['fake']);
  while (quiet.startups.holding.length > 0 && Date.now() - t0 < 10_000) await new Promise((r) => setTimeout(r, 20));
  assert.equal(quiet.startups.history[0].how, 'settled');
  await quiet.s.supervisor.stopAll();

  const dying = withStartups({});
  dying.s.supervisor.startedAfterReadyMs = 60_000;
  const h = await dying.s.supervisor.ensure(await placed(dying.s, dying.file));
  process.kill(h.client.pid!, 'SIGKILL');
  await new Promise<void>((r) => h.client.once('exit', () => r()));
  assert.deepEqual(dying.startups.holding, []);
  assert.equal(dying.startups.history[0].how, 'exited');
  assert.deepEqual(dying.log, ['hold', 'release']);
});
