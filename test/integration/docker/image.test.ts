import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import { runScript, runnerImage, type ExecResult } from './support';

// Each check runs inside the runner image (one container for all of them, to stay fast);
// every block prints a marker line and the tool's own output.
const CHECKS: Record<string, string> = {
  user: 'id -u; id -g; stat -c %u /workspace',
  node: 'node -e "console.log(process.versions.node)"',
  runner:
    'test -f /opt/tether/dist/runner/src/main.bundle.js && test -n "$(ls /opt/tether/compile-cache/*/)" && node -e "require(\'/opt/tether/node_modules/vscode-jsonrpc/node\'); console.log(\'ok\')"',
  python:
    "python3 -c \"import debugpy, pandas, matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt; print('ok', debugpy.__version__, pandas.__version__)\"",
  venv: 'python3 -m venv /tmp/v && /tmp/v/bin/python -c "print(\'ok\')" && python3 -m pip --version',
  tsls: 'typescript-language-server --version && tsc --version',
  pyright: 'pyright --version',
  clangd: 'clangd --version',
  lldbdap: 'command -v lldb-dap && lldb-dap --help | head -1',
  delve: 'dlv version',
  go: 'go version && gopls version',
  cc: 'printf "int main(){return 42;}" > /tmp/a.c && gcc -o /tmp/a /tmp/a.c && (/tmp/a; echo "exit=$?") && g++ --version | head -1 && make --version | head -1',
  git: 'git --version',
  absent: 'command -v rust-analyzer || echo "no rust-analyzer"; command -v dart || echo "no dart"',
};

const sections = new Map<string, ExecResult>();

before(async () => {
  const script = Object.entries(CHECKS)
    .map(([name, cmd]) => `echo "@@${name}"; ( ${cmd} ) 2>&1; echo "@@${name}:exit=$?"`)
    .join('\n');
  const res = await runScript(runnerImage(), script);
  for (const [name] of Object.entries(CHECKS)) {
    const m = new RegExp(`@@${name}\\n([\\s\\S]*?)@@${name}:exit=(\\d+)`).exec(res.stdout);
    sections.set(name, {
      exitCode: m ? Number(m[2]) : null,
      stdout: m?.[1] ?? '',
      stderr: m ? '' : res.stdout + res.stderr,
    });
  }
});

function check(name: string, expect: RegExp) {
  const s = sections.get(name)!;
  assert.equal(s.exitCode, 0, `${name} failed:\n${s.stdout}${s.stderr}`);
  assert.match(s.stdout, expect);
}

test('runs as uid 1000, which owns /workspace', () => check('user', /^1000\n1000\n1000\n$/));
test('carries a Node >= 20', () => {
  check('node', /^\d+\./);
  assert.ok(Number(sections.get('node')!.stdout.split('.')[0]) >= 20);
});
test('carries the built runner and its runtime modules', () => check('runner', /ok/));
test('python3 imports debugpy, pandas and matplotlib', () => check('python', /^ok /));
test('python3 makes venvs and has pip', () => check('venv', /ok\npip /));
test('typescript-language-server 5 and typescript 5', () => check('tsls', /^5\.[\s\S]*Version 5\./));
test('pyright', () => check('pyright', /pyright 1\./));
test('clangd', () => check('clangd', /clangd version/));
test('lldb-dap (lldb-19)', () => check('lldbdap', /\/lldb-dap\n/));
test('delve', () => check('delve', /Delve Debugger/));
test('go and gopls', () => check('go', /go version go1\.[\s\S]*gopls/));
test('gcc compiles and the program runs; g++ and make exist', () => check('cc', /exit=42\n.*g\+\+[\s\S]*GNU Make/));
test('git', () => check('git', /git version/));
test('rust-analyzer and dart are absent (tools report them missing)', () =>
  check('absent', /no rust-analyzer\nno dart/));
