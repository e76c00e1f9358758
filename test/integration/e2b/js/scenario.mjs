// E2B's JavaScript SDKs, unchanged, driving a tether gateway: configured only through E2B's own
// variables (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY). Each check prints one JSON line; a
// failure throws, and the exit code says so.
import assert from 'node:assert/strict';
import { CommandExitError, Sandbox } from '@e2b/code-interpreter';

const check = (name, facts = {}) => console.log(JSON.stringify({ check: name, ...facts }));

async function until(what, fn, ms = 15000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const v = await fn();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const started = Date.now();
const sbx = await Sandbox.create({ timeoutMs: 600_000, metadata: { suite: 'e2b-js' } });
check('create', { sandboxId: sbx.sandboxId, ms: Date.now() - started });
try {
  const info = await sbx.files.write('/home/user/js.txt', 'from js\n');
  assert.equal(info.path, '/home/user/js.txt');
  assert.equal(await sbx.files.read('/home/user/js.txt'), 'from js\n');
  const entries = await sbx.files.list('/home/user');
  assert.ok(entries.some((e) => e.name === 'js.txt'));
  check('files');

  await sbx.files.makeDir('/home/user/w');
  const events = [];
  const watcher = await sbx.files.watchDir('/home/user/w', (e) => events.push(e), { recursive: true });
  await sbx.commands.run('echo x > w/created.txt');
  await until('the watch event', () => events.some((e) => e.name === 'created.txt'));
  await watcher.stop();
  check('watch', { events: events.length });

  const out = [];
  const r = await sbx.commands.run('echo one; echo two >&2; echo three', { onStdout: (d) => out.push(d) });
  assert.equal(r.stdout, 'one\nthree\n');
  assert.equal(r.stderr, 'two\n');
  assert.equal(out.join(''), 'one\nthree\n');
  await assert.rejects(sbx.commands.run('exit 5'), (e) => e instanceof CommandExitError && e.exitCode === 5);
  const bg = await sbx.commands.run('sleep 300', { background: true });
  assert.ok((await sbx.commands.list()).some((p) => p.pid === bg.pid));
  await bg.kill();
  check('commands');

  let ptyText = '';
  const decoder = new TextDecoder();
  const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (ptyText += decoder.decode(d)) });
  await sbx.pty.resize(term.pid, { cols: 120, rows: 40 });
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size; exit\n'));
  await term.wait();
  assert.match(ptyText, /40 120/);
  check('pty');

  const ex = await sbx.runCode('import pandas as pd\ndf = pd.DataFrame({"n": [1, 2, 3]})\ndf.n.sum()');
  assert.equal(ex.text, '6');
  const js = await sbx.runCode('[1, 2, 3].map((x) => x * 2).join(",")', { language: 'javascript' });
  assert.equal(js.text, "'2,4,6'");
  const err = await sbx.runCode('raise ValueError("bad")');
  assert.equal(err.error?.name, 'ValueError');
  check('run_code');

  await assert.rejects(sbx.files.read('/etc/hostname'), /outside/);
  await assert.rejects(Sandbox.connect('no-such-sandbox'), /not found/i);
  check('bad_inputs');
} finally {
  await sbx.kill();
}
const listed = await Sandbox.list().nextItems();
assert.ok(!listed.some((s) => s.sandboxId === sbx.sandboxId));
check('kill');
