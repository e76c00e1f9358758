"""The Python kernel: this script, run by the kernel's own python3 (`python3 -u driver.py LIMITS`).

LIMITS (argv[1]) is a JSON object of KernelLimits. fd 3 carries commands in, fd 4 messages out;
the wire's names come from ../wire.json, shared with wire.ts. The cell's namespace is a fresh
`__main__` module; the driver keeps its own state in this script's globals, which cells never see.
"""

from __future__ import annotations

import ast
import base64
import builtins
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import linecache
import os
import queue
import re
import shlex
import signal
import site
import socket
import struct
import subprocess
import sys
import threading
import time
import timeit as _timeit
import traceback
import types
import urllib.parse
import warnings
from typing import TYPE_CHECKING, Any, Dict, List, cast

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Iterable

# Cells import from the working directory, as under `python -c`, not from this script's folder,
# which Python put first on the path when it started the script.
if not getattr(sys.flags, 'safe_path', False):  # -P or PYTHONSAFEPATH (3.11+): no path was put first
    sys.path[0] = ''


class WireError(Exception):
    """The driver and wire.json disagree: a bug in this file or in wire.json, never bad input."""


def load_wire() -> dict[str, Any]:
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, 'wire.json'), encoding='utf-8') as f:
        return json.load(f)


WIRE = load_wire()
(TAG,) = WIRE['tag']
MESSAGE_FIELDS: dict[str, set[str]] = {kind: set(fields) for kind, fields in WIRE['messages'].items()}


def command(kind: str, *fields: str) -> str:
    """A command's kind, once wire.json is seen to declare it with exactly these fields."""
    declared = WIRE['commands'].get(kind)
    if declared is None or set(declared) != set(fields):
        raise WireError('wire.json does not declare the command ' + kind + ' with the fields ' + ', '.join(fields))
    return kind


EXEC = command('exec', 'cell', 'code')
TOOL_RESULT = command('tool_result', 'id', 'result')
SAVE_STATE = command('save_state', 'cell', 'path', 'limit')
LOAD_STATE = command('load_state', 'cell', 'path')
IMPORT_MODULES = command('import_modules', 'cell', 'modules')

LIMITS: dict[str, int] = json.loads(sys.argv[1])
if set(LIMITS) != set(WIRE['limits']):
    raise WireError('the limits given (' + ', '.join(sorted(LIMITS)) + ') are not those of wire.json')
sys.argv = ['']
IN_FD: int = WIRE['fds']['in']
OUT_FD: int = WIRE['fds']['out']
for _fd in (IN_FD, OUT_FD):
    os.set_inheritable(_fd, False)
_out_lock = threading.Lock()
_out = os.fdopen(OUT_FD, 'wb', buffering=0)


class State:
    cell = 0
    running = False
    loop: asyncio.AbstractEventLoop | None = None
    done_sent = True
    # The main thread is writing a message: an interrupt now would cut it in half.
    sending = False
    deferred_interrupt = False


state = State()


def send(kind: str, **fields: object) -> None:
    """Writes one message; its kind and fields must be those wire.json declares."""
    declared = MESSAGE_FIELDS.get(kind)
    if declared is None or not declared.issuperset(fields):
        raise WireError('wire.json declares no message ' + kind + ' with the fields ' + ', '.join(fields))
    data = (json.dumps({TAG: kind, **fields}, default=str) + '\n').encode()
    on_main = threading.current_thread() is threading.main_thread()
    with _out_lock:
        if on_main:
            state.sending = True
        try:
            view = memoryview(data)
            while view:
                n = _out.write(view)
                view = view[n:]
        finally:
            if on_main:
                state.sending = False
    if kind == 'done':
        state.done_sent = True
    if on_main and state.deferred_interrupt:
        state.deferred_interrupt = False
        if state.running:
            raise KeyboardInterrupt


commands: queue.Queue[dict[str, Any]] = queue.Queue()
# A bridged tool call waiting for its result: the event is set once the result is in the list.
pending: dict[int, list[Any]] = {}
pending_lock = threading.Lock()
next_tool_id = [0]


def read_commands() -> None:
    src = os.fdopen(IN_FD, 'rb')
    for line in src:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get(TAG) == TOOL_RESULT:
            with pending_lock:
                slot = pending.pop(msg.get('id'), None)
            if slot is not None:
                slot[1] = msg.get('result')
                slot[0].set()
        else:
            commands.put(msg)
    # The runner is gone: nothing more will come.
    os._exit(0)


class CellStream(io.TextIOBase):
    """sys.stdout / sys.stderr of a cell: batched onto the wire, capped per cell."""

    def __init__(self, name: str, fd: int) -> None:
        self.name, self._fd = name, fd
        self._lock = threading.RLock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._buf: list[str] = []
            self._sent, self._omitted, self._tail = 0, 0, ''

    @property
    def encoding(self) -> str:
        return 'utf-8'

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._fd

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError('write() argument must be str, not ' + type(s).__name__)
        written = len(s)
        with self._lock:
            room = LIMITS['streamChars'] - self._sent
            if room > 0:
                head = s[:room]
                self._buf.append(head)
                self._sent += len(head)
                s = s[room:]
                if sum(map(len, self._buf)) >= 8192:
                    self.flush()
            if s:
                self._omitted += len(s)
                self._tail = (self._tail + s[-LIMITS['tailChars'] :])[-LIMITS['tailChars'] :]
        return written

    def flush(self) -> None:
        with self._lock:
            if self._buf:
                text, self._buf = ''.join(self._buf), []
                send('stream', cell=state.cell, name=self.name, text=text)

    def finish(self) -> None:
        with self._lock:
            self.flush()
            if self._omitted:
                send('stream', cell=state.cell, name=self.name, text=self._tail, omitted=self._omitted - len(self._tail))
            self.reset()


stdout, stderr = CellStream('stdout', 1), CellStream('stderr', 2)


def flush_periodically() -> None:
    while True:
        time.sleep(0.1)
        if state.running:
            stdout.flush()
            stderr.flush()


def flush_streams() -> None:
    stdout.flush()
    stderr.flush()


# ---- rich output ---------------------------------------------------------------------------


def clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n] + '… (' + str(len(s)) + ' chars)'


# A content item of the wire (a ContentItem of protocol.ts).
Item = Dict[str, Any]


def table_of(df: Any) -> Item:
    pd: Any = sys.modules['pandas']  # loaded: render_rich saw it in sys.modules
    if isinstance(df, pd.Series):
        df = df.to_frame()
    rows_cap, cols_cap, cell_cap = LIMITS['tableRows'], LIMITS['tableColumns'], LIMITS['cellChars']
    shown = df.iloc[:rows_cap, :cols_cap]

    def label(c: object) -> str:
        return ' / '.join(map(str, c)) if isinstance(c, tuple) else str(c)

    index_name = label(df.index.name) if df.index.name is not None else ''
    columns = [index_name] + [label(c) for c in shown.columns]
    if df.shape[1] > cols_cap:
        columns.append('… ' + str(df.shape[1] - cols_cap) + ' more columns')
    rows: list[list[str]] = []
    for idx, values in zip(shown.index, shown.itertuples(index=False, name=None)):
        row = [clip(label(idx), cell_cap)] + [clip(str(v), cell_cap) for v in values]
        if df.shape[1] > cols_cap:
            row.append('…')
        rows.append(row)
    item: Item = {'type': 'table', 'columns': columns, 'rows': rows}
    if len(df) > rows_cap:
        item['omittedRows'] = len(df) - rows_cap
    return item


def png_of_figure(fig: Any) -> Item:
    buf = io.BytesIO()
    fig.savefig(buf, format='png', bbox_inches='tight')
    return {'type': 'image', 'mime': 'image/png', 'data': base64.b64encode(buf.getvalue()).decode()}


shown_figures: set[int] = set()


def figure_of(obj: Any) -> Any:
    if 'matplotlib' not in sys.modules:
        return None
    # The cell already imported matplotlib; where the driver is type-checked it may not be installed.
    from matplotlib.axes import Axes  # pyright: ignore[reportMissingImports]
    from matplotlib.figure import Figure  # pyright: ignore[reportMissingImports]

    if isinstance(obj, Figure):
        return obj
    if isinstance(obj, Axes):
        return obj.figure
    return None


def render(obj: object) -> Item:
    try:
        return render_rich(obj)
    except Exception as e:
        # A rich form that fails to render must not fail the cell: fall back to the repr.
        return {'type': 'text', 'text': clip(safe_repr(obj), LIMITS['reprChars']) + '\n(could not render it richly: ' + repr(e) + ')'}


def safe_repr(obj: object) -> str:
    try:
        return repr(obj)
    except Exception as e:
        return '<' + type(obj).__name__ + ' object; repr() failed: ' + repr(e) + '>'


def render_rich(obj: object) -> Item:
    pd = sys.modules.get('pandas')
    if pd is not None and isinstance(obj, (pd.DataFrame, pd.Series)):
        return table_of(obj)
    fig = figure_of(obj)
    if fig is not None:
        shown_figures.add(id(fig))
        item = png_of_figure(fig)
        close_figure(fig)
        return item
    repr_markdown = getattr(obj, '_repr_markdown_', None)
    if callable(repr_markdown) and not isinstance(obj, type):
        try:
            text = repr_markdown()
            if isinstance(text, str):
                return {'type': 'text', 'text': clip(text, LIMITS['reprChars'])}
        except Exception:
            pass
    repr_png = getattr(obj, '_repr_png_', None)
    if callable(repr_png) and not isinstance(obj, type):
        try:
            data = repr_png()
            if isinstance(data, bytes):
                return {'type': 'image', 'mime': 'image/png', 'data': base64.b64encode(data).decode()}
        except Exception:
            pass
    return {'type': 'text', 'text': clip(repr(obj), LIMITS['reprChars'])}


def close_figure(fig: Any) -> None:
    plt = sys.modules.get('matplotlib.pyplot')
    if plt is not None:
        plt.close(fig)


def display(*objs: object) -> None:
    """Shows each object in the cell's result: tables for DataFrames, images for figures."""
    flush_streams()
    for obj in objs:
        send('display', cell=state.cell, item=render(obj))


def show_open_figures() -> None:
    plt = sys.modules.get('matplotlib.pyplot')
    if plt is None:
        return
    for num in plt.get_fignums():
        fig = plt.figure(num)
        if id(fig) not in shown_figures:
            send('display', cell=state.cell, item=png_of_figure(fig))
    plt.close('all')
    shown_figures.clear()


# ---- the tool bridge -----------------------------------------------------------------------


class ToolError(Exception):
    """A bridged tool call returned an error result (refused, invalid, or failed)."""


class ToolResult(str):
    """The text of a tool's result; .structured, .content and .is_error carry the rest."""

    content: list[Item]
    structured: Any
    is_error: bool

    def __new__(cls, result: dict[str, Any]) -> ToolResult:
        content = result.get('content') or []
        text = '\n'.join(c.get('text', '') for c in content if c.get('type') == 'text')
        self = str.__new__(cls, text)
        self.content, self.structured, self.is_error = content, result.get('structured'), bool(result.get('isError'))
        return self


def tool(name: str, args: object = None) -> ToolResult:
    """Calls one of this run's tools; the same approvals and limits apply as to the model's calls."""
    flush_streams()
    with pending_lock:
        next_tool_id[0] += 1
        call_id = next_tool_id[0]
        slot = pending[call_id] = [threading.Event(), None]
    send('tool', id=call_id, name=name, args={} if args is None else args)
    try:
        while not slot[0].wait(0.5):
            pass
    finally:
        with pending_lock:
            pending.pop(call_id, None)
    result = ToolResult(slot[1] or {'content': [{'type': 'text', 'text': 'no result'}], 'isError': True})
    if result.is_error:
        raise ToolError(str(result))
    return result


# ---- IPython idioms ------------------------------------------------------------------------


class MagicError(Exception):
    pass


class PipError(Exception):
    pass


def stream_command(argv: str | list[str], shell: bool = False, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Runs a command, copying its output into the cell as it comes; returns (code, text)."""
    proc = subprocess.Popen(
        argv,
        shell=shell,
        executable='/bin/bash' if shell else None,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    out = cast(io.BufferedReader, proc.stdout)  # a pipe, as asked above
    seen: list[str] = []
    try:
        for raw in iter(lambda: out.read1(65536), b''):
            chunk = raw.decode('utf-8', 'replace')
            if sum(map(len, seen)) < 200000:
                seen.append(chunk)
            sys.stdout.write(chunk)
        return proc.wait(), ''.join(seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class ShellLines(List[str]):
    """What 'x = !cmd' gives: the output's lines (IPython's SList, minus its extras)."""

    @property
    def s(self) -> str:
        return ' '.join(self)

    @property
    def n(self) -> str:
        return '\n'.join(self)


class Magics:
    def sh(self, cmd: str) -> None:
        code, out = stream_command(cmd, shell=True)
        if code:
            print('[exit status ' + str(code) + ']')
            hint = network_hint(out)
            if hint:
                print(hint)

    def sh_lines(self, cmd: str) -> ShellLines:
        out = subprocess.run(
            cmd, shell=True, executable='/bin/bash', stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        return ShellLines(out.stdout.decode('utf-8', 'replace').splitlines())

    def bash(self, body: str) -> None:
        code, _ = stream_command(['/bin/bash', '-c', body])
        if code:
            raise subprocess.CalledProcessError(code, 'bash cell')

    def writefile(self, args: str, body: str) -> None:
        argv = shlex.split(args)
        append = '-a' in argv
        paths = [a for a in argv if not a.startswith('-')]
        if len(paths) != 1:
            raise MagicError('%%writefile needs one file name')
        with open(os.path.expanduser(paths[0]), 'a' if append else 'w') as f:
            f.write(body)
        print(('Appended to ' if append else 'Writing ') + paths[0])

    def cd(self, arg: str) -> None:
        target = os.path.expanduser(arg.strip() or '~')
        os.chdir(target)
        print(os.getcwd())

    def pwd(self) -> str:
        return os.getcwd()

    def env(self, arg: str) -> dict[str, str] | str | None:
        arg = arg.strip()
        if not arg:
            return dict(os.environ)
        m = re.match(r'^([A-Za-z_][A-Za-z0-9_]*)\s*(?:=\s*|\s+)(.*)$', arg)
        if m:
            os.environ[m.group(1)] = m.group(2)
            print('env: ' + m.group(1) + '=' + m.group(2))
            return None
        return os.environ.get(arg)

    def time_line(self, stmt: str) -> object:
        return self._timed(lambda: run_source(stmt, '<time>', echo_last=False, want_value=True))

    def time_cell(self, body: str, filename: str) -> object:
        return self._timed(lambda: run_source(body, filename, echo_last=True, want_value=False))

    def _timed(self, fn: Callable[[], object]) -> object:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return fn()
        finally:
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            print('CPU times: total ' + human_time(cpu) + '\nWall time: ' + human_time(wall))

    def timeit(self, args: str, body: str | None) -> None:
        argv = iter(shlex.split(args))
        number, repeat = 0, 7
        rest: list[str] = []
        for a in argv:
            if a[:2] in ('-n', '-r'):
                value = int(a[2:] or next(argv, '0'))
                if a[:2] == '-n':
                    number = value
                else:
                    repeat = max(1, value)
            else:
                rest.append(a)
        stmt, setup = (body, ' '.join(rest) or 'pass') if body is not None else (' '.join(rest), 'pass')
        if not stmt.strip():
            raise MagicError('%timeit needs a statement')
        timer = _timeit.Timer(stmt, setup, globals=user_ns)
        if number == 0:
            number, _ = timer.autorange()
        runs = [t / number for t in timer.repeat(repeat, number)]
        mean = sum(runs) / len(runs)
        std = (sum((r - mean) ** 2 for r in runs) / len(runs)) ** 0.5
        print(
            human_time(mean)
            + ' ± '
            + human_time(std)
            + ' per loop (mean ± std. dev. of '
            + str(repeat)
            + ' runs, '
            + str(number)
            + ' loop'
            + ('s' if number != 1 else '')
            + ' each)'
        )

    def pip(self, args: str) -> None:
        argv = shlex.split(args)
        installing = bool(argv) and argv[0] == 'install'
        cmd = [sys.executable, '-m', 'pip'] + argv
        if installing:
            # Fail fast: the run's container has no network, and pip would otherwise retry for minutes.
            cmd += ['--retries', '0', '--timeout', '5']
        env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK='1', PIP_BREAK_SYSTEM_PACKAGES='1', PIP_NO_INPUT='1')
        code, out = stream_command(cmd, env=env)
        if code:
            refused = EGRESS_REFUSED.search(out)
            reason = refused.group(1).strip() if refused else None
            if installing and not reason and os.environ.get('TETHER_EGRESS_SOCKET'):
                reason = egress_refusal(out)
            if installing and reason:
                raise PipError(
                    'pip install failed: the egress proxy refused a request ('
                    + reason
                    + "). This run's egress allow-list: "
                    + (os.environ.get('TETHER_EGRESS_ALLOW') or 'none')
                )
            if installing and OFFLINE.search(out) and os.environ.get('TETHER_EGRESS_SOCKET'):
                raise PipError(
                    'pip install failed: no package index answered. This run reaches the network only '
                    "through the gateway's egress proxy, and only these hosts: " + (os.environ.get('TETHER_EGRESS_ALLOW') or 'none')
                )
            if installing and OFFLINE.search(out):
                raise PipError(
                    "pip install failed: this run has no network access, so pip cannot reach a package "
                    "index. Only packages already installed, or wheels and source folders inside the "
                    "workspace (%pip install ./path), can be installed."
                )
            raise PipError('pip ' + ' '.join(argv) + ' failed with exit status ' + str(code))
        if installing:
            user_site = site.getusersitepackages()
            if os.path.isdir(user_site) and user_site not in sys.path:
                site.addsitedir(user_site)
            importlib.invalidate_caches()
            evicted = evict_packages(argv[1:])
            if evicted:
                print('evicted from sys.modules (the next import loads the new version): ' + ', '.join(sorted(evicted)))


# The gateway's egress proxy puts its reason in the status line, which pip repeats.
EGRESS_REFUSED = re.compile(r'tether egress: ([^\n\'"]*)')


def egress_refusal(pip_output: str) -> str | None:
    """Why the proxy refuses the indexes pip tried: pip without retries does not print it."""
    m = re.search(r'Looking in indexes: (\S+)', pip_output)
    return refusal_of(m.group(1).split(',') if m else ['https://pypi.org/simple'])


def refusal_of(urls: Iterable[str]) -> str | None:
    """Asks the run's proxy about each URL's host and port: its refusal, if it refuses one."""
    if not os.environ.get('TETHER_EGRESS_PORT'):
        return None
    for url in urls:
        try:
            parts = urllib.parse.urlsplit(url.rstrip('.,:;'))
            port = parts.port or (443 if parts.scheme == 'https' else 80)
        except ValueError:
            continue
        # The proxy itself, and loopback names a tool reaches without it (NO_PROXY).
        if not parts.hostname or parts.hostname in ('localhost', '127.0.0.1', '::1'):
            continue
        target = parts.hostname + ':' + str(port)
        try:
            with socket.create_connection(('127.0.0.1', int(os.environ.get('TETHER_EGRESS_PORT', '0'))), timeout=5) as s:
                s.sendall(('CONNECT ' + target + ' HTTP/1.1\r\nHost: ' + target + '\r\n\r\n').encode())
                line = s.makefile('rb').readline().decode('latin-1')
        except (OSError, ValueError):
            continue
        found = EGRESS_REFUSED.search(line)
        if found:
            return found.group(1).strip()
    return None


# What a failed command (npm, cargo, git, curl) prints when a request did not get through.
NETWORK_FAILURE = re.compile(
    r'ENETUNREACH|EAI_AGAIN|ENOTFOUND|ECONNREFUSED|Network is unreachable|Could not resolve host|'
    r'Temporary failure in name resolution|Invalid status code .?403|403 Forbidden|tunneling socket|'
    r'Failed to connect|failed to get successful HTTP response|CONNECT tunnel failed',
    re.I,
)
URL = re.compile(r'\bhttps?://[^\s\'"`<>)]+')


def network_hint(output: str) -> str | None:
    """
    After a failed shell command: why its network requests failed, in this run's terms (npm,
    for one, prints only that the proxy answered 403, not the reason the proxy gave).
    """
    allow = os.environ.get('TETHER_EGRESS_ALLOW') or 'none'
    found = EGRESS_REFUSED.search(output)
    reason = found.group(1).strip() if found else None
    if not os.environ.get('TETHER_EGRESS_SOCKET'):
        if NETWORK_FAILURE.search(output):
            return 'tether: this run has no network access; a request to the network cannot succeed here.'
        return None
    if not reason and NETWORK_FAILURE.search(output):
        # A few distinct URLs at most: each question to the proxy may open a connection upstream.
        reason = refusal_of(list(dict.fromkeys(URL.findall(output)))[:5])
    if reason:
        return "tether: the egress proxy refused a request (" + reason + "). This run's egress allow-list: " + allow
    if NETWORK_FAILURE.search(output):
        return (
            "tether: a network request failed. This run reaches the network only through the gateway's "
            'egress proxy, and only these hosts: ' + allow
        )
    return None


OFFLINE = re.compile(
    r'NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution|'
    r'Network is unreachable|No matching distribution found|Could not find a version',
    re.I,
)


def top_level_modules(dist_name: str) -> set[str]:
    names = {re.sub(r'[-.]', '_', dist_name).lower(), dist_name}
    try:
        import importlib.metadata as md

        dist = md.distribution(dist_name)
        top = dist.read_text('top_level.txt')
        if top:
            names.update(t.strip() for t in top.split() if t.strip())
        for f in dist.files or []:
            parts = f.parts
            if parts and not parts[0].endswith(('.dist-info', '.egg-info', '.data')) and parts[0] != '..':
                names.add(parts[0][:-3] if parts[0].endswith('.py') else parts[0])
    except Exception:
        pass
    return names


def evict_packages(args: Iterable[str]) -> set[str]:
    evicted: set[str] = set()
    for a in args:
        if a.startswith('-'):
            continue
        base = os.path.basename(a.rstrip('/'))
        if base.endswith('.whl'):
            # A wheel's file name starts with its distribution name: name-version-tags.whl
            dist = base.split('-', 1)[0]
        elif '/' in a or base.endswith(('.tar.gz', '.zip')):
            continue
        else:
            dist = re.split(r'[\[<>=!~;@ ]', a, maxsplit=1)[0]
        for mod in top_level_modules(dist):
            for key in list(sys.modules):
                if key == mod or key.startswith(mod + '.'):
                    del sys.modules[key]
                    evicted.add(mod)
    return evicted


def human_time(s: float) -> str:
    for unit, scale in (('s', 1), ('ms', 1e-3), ('µs', 1e-6), ('ns', 1e-9)):
        if s >= scale or unit == 'ns':
            return ('%.3g ' % (s / scale)) + unit
    return str(s)


LINE_MAGIC = re.compile(r'^(\s*)%(\w+)(.*)$')
SHELL_LINE = re.compile(r'^(\s*)!(?!=)(.*)$')
ASSIGN_SHELL = re.compile(r'^(\s*)([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)\s*=\s*!(?!=)(.*)$')
CELL_MAGIC = re.compile(r'^%%(\w+)[ \t]*(.*)$')
LINE_MAGICS: dict[str, Callable[[str], str]] = {
    'pip': lambda a: 'pip(' + repr(a.strip()) + ')',
    'cd': lambda a: 'cd(' + repr(a) + ')',
    'pwd': lambda a: 'pwd()',
    'env': lambda a: 'env(' + repr(a) + ')',
    'time': lambda a: 'time_line(' + repr(a.strip()) + ')',
    'timeit': lambda a: 'timeit(' + repr(a) + ', None)',
    'ls': lambda a: 'sh(' + repr('ls ' + a) + ')',
    'matplotlib': lambda a: 'noop()',
}


def rewrite(code: str, filename: str) -> str:
    """Turns the IPython idioms people type by reflex into plain Python, line for line."""
    try:
        # Valid Python has no idioms to rewrite: a line like "!x" inside a string stays as it is.
        ast.parse(code)
        return code
    except SyntaxError:
        pass
    lines = code.split('\n')
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None:
        m = CELL_MAGIC.match(lines[first].strip())
        if m:
            name, args = m.group(1), m.group(2)
            body = '\n'.join(lines[first + 1 :])
            lead = '\n' * first
            if name in ('bash', 'sh'):
                return lead + '__tether__.bash(' + repr(body) + ')'
            if name == 'timeit':
                return lead + '__tether__.timeit(' + repr(args) + ', ' + repr(body) + ')'
            if name == 'time':
                return lead + '__tether__.time_cell(' + repr(body) + ', ' + repr(filename) + ')'
            if name == 'writefile':
                return lead + '__tether__.writefile(' + repr(args) + ', ' + repr(body + '\n') + ')'
            raise MagicError('cell magic %%' + name + ' is not supported here; supported: %%bash, %%timeit, %%time, %%writefile')
    out: list[str] = []
    for line in lines:
        m = ASSIGN_SHELL.match(line)
        if m:
            out.append(m.group(1) + m.group(2) + ' = __tether__.sh_lines(' + repr(m.group(3)) + ')')
            continue
        m = SHELL_LINE.match(line)
        if m:
            cmd = m.group(2)
            if re.match(r'^\s*pip3?\s', cmd):
                out.append(m.group(1) + '__tether__.pip(' + repr(re.sub(r'^\s*pip3?\s+', '', cmd)) + ')')
            else:
                out.append(m.group(1) + '__tether__.sh(' + repr(cmd) + ')')
            continue
        m = LINE_MAGIC.match(line)
        if m:
            name = m.group(2)
            if name not in LINE_MAGICS:
                raise MagicError('%' + name + ' is not supported here; supported: %pip, %cd, %pwd, %env, %time, %timeit, %ls, !cmd, %%bash')
            out.append(m.group(1) + '__tether__.' + LINE_MAGICS[name](m.group(3)))
            continue
        out.append(line)
    return '\n'.join(out)


class TetherNamespace(Magics):
    def noop(self) -> None:
        return None


class Image:
    """IPython.display.Image, for PNG data or a PNG file."""

    def __init__(self, data: bytes | str | None = None, filename: str | None = None, **_: object) -> None:
        if filename is None and isinstance(data, str):
            filename, data = data, None
        if filename is not None:
            with open(filename, 'rb') as f:
                data = f.read()
        self.data = cast('bytes | None', data)  # a str was taken as the file's name above

    def _repr_png_(self) -> bytes | None:
        return self.data


class TextDisplay:
    """IPython.display.Markdown / HTML / Pretty: shown as their text."""

    def __init__(self, data: object = None, **_: object) -> None:
        self.data = '' if data is None else str(data)

    def __repr__(self) -> str:
        return self.data


class IPythonStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves 'IPython' and 'IPython.display' when no real IPython is installed (it is last on
    sys.meta_path), so 'from IPython.display import display' works; get_ipython() is None, as
    outside a notebook, so libraries probing for a notebook behave as in plain Python."""

    NAMES = ('IPython', 'IPython.display')

    def find_spec(self, name: str, path: object, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if name in self.NAMES:
            return importlib.util.spec_from_loader(name, self, is_package=name == 'IPython')
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        if module.__name__ == 'IPython':
            vars(module).update(get_ipython=lambda: None, display=display)
        else:
            vars(module).update(display=display, Image=Image, Markdown=TextDisplay, HTML=TextDisplay, Pretty=TextDisplay, Code=TextDisplay)


# ---- running a cell ------------------------------------------------------------------------

user_module = types.ModuleType('__main__')
user_module.__dict__.update(
    {'__builtins__': builtins, 'display': display, 'tool': tool, 'ToolError': ToolError, '__tether__': TetherNamespace()}
)
user_ns = user_module.__dict__
sys.modules['__main__'] = user_module
# Cells are compiled without inheriting this file's __future__ imports (dont_inherit).
FLAGS = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
CO_COROUTINE = 0x0080


def run_code(code: types.CodeType) -> Any:
    if code.co_flags & CO_COROUTINE:
        import asyncio

        if state.loop is None:
            state.loop = asyncio.new_event_loop()
        return state.loop.run_until_complete(eval(code, user_ns))
    return eval(code, user_ns)


def run_source(src: str, filename: str, echo_last: bool, want_value: bool, shown: str | None = None) -> Any:
    # Tracebacks quote the cell as written (idioms are rewritten line for line, so lines match).
    text = src if shown is None else shown
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    tree = ast.parse(src, filename, 'exec')
    last = None
    tail = tree.body[-1] if tree.body else None
    if isinstance(tail, ast.Expr) and (want_value or not src.rstrip().endswith(';')):
        tree.body.pop()
        last = ast.Expression(tail.value)
    run_code(compile(tree, filename, 'exec', flags=FLAGS, dont_inherit=True))
    if last is None:
        return None
    value = run_code(compile(last, filename, 'eval', flags=FLAGS, dont_inherit=True))
    if echo_last and value is not None:
        user_ns['_'] = value
        display(value)
    return value


# Frames left out of a cell's traceback: this script's, and those of code run from a string.
DRIVER_FILES = ('<string>', __file__)


def format_error(e: BaseException) -> str:
    if isinstance(e, SyntaxError) and e.filename and e.filename.startswith('<cell-'):
        return ''.join(traceback.format_exception_only(type(e), e)).rstrip()
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename not in DRIVER_FILES]
    if len(frames) > 12:
        frames = [*frames[:4], None, *frames[-6:]]
    lines = ['Traceback (most recent call last):'] if frames else []
    for f in frames:
        if f is None:
            lines.append('  …')
            continue
        where = ('cell line ' + str(f.lineno)) if f.filename.startswith('<cell-') else ('File "' + f.filename + '", line ' + str(f.lineno))
        lines.append('  ' + where + ', in ' + f.name)
        if f.line:
            lines.append('    ' + f.line.strip())
    lines.extend(line.rstrip('\n') for line in traceback.format_exception_only(type(e), e))
    return '\n'.join(lines)


def run_cell(cell: int, code: str) -> None:
    state.cell, state.running = cell, True
    filename = '<cell-' + str(cell) + '>'
    status = 'ok'
    try:
        try:
            run_source(rewrite(code, filename), filename, echo_last=True, want_value=False, shown=code)
        finally:
            try:
                flush_streams()
                show_open_figures()
            except Exception as fig_error:
                print('could not render a figure: ' + repr(fig_error), file=sys.stderr)
    except KeyboardInterrupt as e:
        status = 'interrupted'
        send('error', cell=cell, ename='KeyboardInterrupt', evalue='', traceback=format_error(e))
    except BaseException as e:
        status = 'error'
        send('error', cell=cell, ename=type(e).__name__, evalue=str(e), traceback=format_error(e))
    finally:
        state.running = False
        stdout.finish()
        stderr.finish()
        send('done', cell=cell, status=status)


# ---- keeping the namespace across a pause ---------------------------------------------------
# save_state writes the user's variables to a file; load_state reads them back into a fresh
# kernel. Objects go through dill when it is importable (functions and classes defined in cells
# by value), else cloudpickle, else the standard pickle. Modules are kept by name and imported
# again. The file is a standard-pickle stream of records: a header, then ('module', alias, name)
# and ('variable', name) records, then ('end', count). A variable's record is followed by the
# length of its value (8 bytes, big-endian) and the value as its serializer wrote it, straight
# into the file: a 100 MB DataFrame held as one bytes object inside its record (version 1, still
# read) cost a copy more each way, ~120 ms to read back here. The length lets a value that does
# not read back be skipped.

STATE_FORMAT = 'tether-python-state'
# Names the driver puts in the namespace itself: a new kernel has its own.
DRIVER_NAMES = frozenset(('__builtins__', 'display', 'tool', 'ToolError', '__tether__'))


def state_serializer(name: str | None = None) -> tuple[str, Any]:
    """The serializer by that name, or the first importable of dill, cloudpickle, pickle."""
    import pickle

    for candidate in (name,) if name else ('dill', 'cloudpickle'):
        if candidate == 'pickle':
            return 'pickle', pickle
        try:
            return candidate, importlib.import_module(candidate)
        except Exception:
            continue
    if name:
        raise ImportError(name + ' is not importable by this Python')
    return 'pickle', pickle


def unkeepable(value: object, serializer: str) -> str | None:
    """Why a value cannot be kept across a pause, for the kinds whose reason is known in advance."""
    if getattr(value, '__globals__', None) is globals() or isinstance(value, (CellStream, Magics)):
        return "one of the kernel's own helpers: a new kernel has it again under its own name"
    if isinstance(value, io.IOBase):
        name = getattr(value, 'name', None)
        where = ' (' + str(name) + ')' if isinstance(name, (str, int)) else ''
        return 'an open file' + where + ': a pause closes it; open it again'
    if isinstance(value, socket.socket):
        return 'a socket: a pause closes its connection; connect again'
    if isinstance(value, (types.GeneratorType, types.AsyncGeneratorType, types.CoroutineType)):
        return 'a ' + type(value).__name__ + ': where it stood cannot be saved; create it again'
    if isinstance(value, threading.Thread):
        return 'a thread: a pause stops it; start it again'
    if isinstance(value, subprocess.Popen):
        return 'a child process: a pause stops it; start it again'
    if serializer == 'pickle' and isinstance(value, (types.FunctionType, type)) and getattr(value, '__module__', None) == '__main__':
        return (
            'defined in a cell, and the standard pickle keeps functions and classes by name only (dill would keep it); '
            'run its definition again'
        )
    return None


STATE_VERSION = 2
LENGTH = struct.Struct('>Q')


class StateLimit(Exception):
    """A value's bytes reached the state's limit while it was written."""


class LimitedWriter:
    """The state file as a serializer writes to it: a write that would pass `limit` raises."""

    def __init__(self, f: Any, limit: int) -> None:
        self.f = f
        self.limit = limit

    def write(self, data: Any) -> int:
        if self.f.tell() + memoryview(data).nbytes > self.limit:
            raise StateLimit()
        return self.f.write(data)


def save_state(path: str, limit: int) -> dict[str, Any]:
    import pickle

    serializer, ser = state_serializer()
    kept: list[str] = []
    modules: dict[str, str] = {}
    imports: set[str] = {serializer}
    not_kept: list[dict[str, str]] = []
    with open(path, 'xb') as f:
        os.chmod(path, 0o600)
        header = {'format': STATE_FORMAT, 'version': STATE_VERSION, 'serializer': serializer, 'python': sys.version.split()[0]}
        pickle.dump(header, f)
        out = LimitedWriter(f, limit)
        for name, value in list(user_ns.items()):
            if name in DRIVER_NAMES or (name.startswith('__') and name.endswith('__')):
                continue
            if isinstance(value, types.ModuleType):
                modules[name] = value.__name__
                pickle.dump(('module', name, value.__name__), f)
                continue
            why = unkeepable(value, serializer)
            if why is None:
                start = f.tell()
                try:
                    pickle.dump(('variable', name), f)
                    f.write(LENGTH.pack(0))
                    at = f.tell()
                    ser.dump(value, out, protocol=pickle.HIGHEST_PROTOCOL)
                    end = f.tell()
                except StateLimit:
                    why = 'its bytes would pass the limit of the saved state (' + str(limit - start) + ' bytes left)'
                except Exception as e:
                    why = 'it does not serialize (' + type(e).__name__ + ': ' + clip(str(e), 200) + ')'
                else:
                    f.seek(at - LENGTH.size)
                    f.write(LENGTH.pack(end - at))
                    f.seek(end)
                    kept.append(name)
                    module = getattr(type(value), '__module__', None)
                    if isinstance(module, str) and module not in ('builtins', user_module.__name__):
                        imports.add(module)
                    continue
                f.seek(start)
                f.truncate()
            not_kept.append({'what': 'variable ' + name + ' (' + type(value).__name__ + ')', 'why': why})
        pickle.dump(('end', len(kept) + len(modules)), f)
        f.flush()
        os.fsync(f.fileno())
        size = f.tell()
    imports.update(modules.values())
    report = {'serializer': serializer, 'variables': kept, 'modules': modules, 'bytes': size, 'notKept': not_kept}
    return {**report, 'imports': sorted(imports)}


def _own_globals(fn: types.FunctionType) -> bool:
    """Whether a function read back carries a globals dict of its own rather than its module's."""
    module = sys.modules.get(fn.__module__) if isinstance(fn.__module__, str) else None
    return fn.__globals__ is not user_ns and fn.__globals__ is not getattr(module, '__dict__', None)


def _rebound(fn: types.FunctionType) -> types.FunctionType:
    again = types.FunctionType(fn.__code__, user_ns, fn.__name__, fn.__defaults__, fn.__closure__)
    again.__kwdefaults__ = fn.__kwdefaults__
    again.__qualname__ = fn.__qualname__
    again.__annotations__ = fn.__annotations__
    again.__doc__ = fn.__doc__
    again.__dict__.update(fn.__dict__)
    return again


def in_namespace(value: Any) -> Any:
    """A function or class defined in a cell, read back over the kernel's namespace.

    A serializer that keeps a function by value gives it a globals dict of its own (cloudpickle
    copies just the names it uses), so after a resume it would see the values of the pause, not
    the namespace the next cell changes. It is made again over the namespace, as the cell made it.
    """
    if isinstance(value, types.FunctionType) and _own_globals(value):
        return _rebound(value)
    if isinstance(value, type) and value.__module__ == user_module.__name__:
        for key, member in list(vars(value).items()):
            if isinstance(member, types.FunctionType) and _own_globals(member):
                setattr(value, key, _rebound(member))
    return value


def load_state(path: str) -> dict[str, Any]:
    import pickle

    kept: list[str] = []
    modules: dict[str, str] = {}
    not_kept: list[dict[str, str]] = []
    with open(path, 'rb') as f:
        header = pickle.load(f)
        if not isinstance(header, dict) or header.get('format') != STATE_FORMAT:
            raise ValueError(path + ' is not a saved Python state')
        serializer = str(header.get('serializer'))
        try:
            _, ser = state_serializer(serializer)
        except ImportError as e:
            ser, missing = None, str(e)
        size = os.fstat(f.fileno()).st_size
        version = header.get('version')
        while True:
            record = pickle.load(f)
            if record[0] == 'end':
                break
            if record[0] == 'module':
                _, alias, module = record
                try:
                    user_ns[alias] = importlib.import_module(module)
                    modules[alias] = module
                except Exception as e:
                    not_kept.append(
                        {
                            'what': 'module ' + alias + ' (' + module + ')',
                            'why': 'it could not be imported again (' + type(e).__name__ + ': ' + clip(str(e), 200) + ')',
                        }
                    )
                continue
            name = record[1]
            after = None
            if version != 1:
                (length,) = LENGTH.unpack(f.read(LENGTH.size))
                after = f.tell() + length
            try:
                if ser is None:
                    not_kept.append({'what': 'variable ' + name, 'why': 'it was saved with ' + serializer + ', but ' + missing})
                    continue
                value = ser.loads(record[2]) if version == 1 else ser.load(f)
                user_ns[name] = in_namespace(value)
                kept.append(name)
            except Exception as e:
                not_kept.append(
                    {'what': 'variable ' + name, 'why': 'it could not be read back (' + type(e).__name__ + ': ' + clip(str(e), 200) + ')'}
                )
            finally:
                if after is not None:
                    f.seek(after)
    return {'serializer': serializer, 'variables': kept, 'modules': modules, 'bytes': size, 'notKept': not_kept}


def import_ahead(cell: int, modules: list[str]) -> None:
    """Imports what a load_state will import, while its file is still being checked."""
    state.cell = cell
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException:
            pass  # load_state names what it cannot import
    send('done', cell=cell, status='ok')


def run_state(cell: int, kind: str, msg: dict[str, Any]) -> None:
    """save_state or load_state, answered as a cell: a state message (or an error), then done."""
    state.cell = cell
    status = 'ok'
    try:
        report = save_state(msg['path'], int(msg['limit'])) if kind == SAVE_STATE else load_state(msg['path'])
        send('state', cell=cell, report=report)
    except BaseException as e:
        status = 'error'
        send('error', cell=cell, ename=type(e).__name__, evalue=str(e), traceback=format_error(e))
    finally:
        send('done', cell=cell, status=status)


def on_sigint(signum: int, frame: types.FrameType | None) -> None:
    # Only a running cell is interrupted; a signal between cells must not kill the driver.
    if not state.running:
        return
    if state.sending:
        state.deferred_interrupt = True
        return
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGINT, on_sigint)
    warnings.filterwarnings('ignore', message='.*non-interactive.*')
    sys.stdout, sys.stderr = stdout, stderr
    sys.meta_path.append(IPythonStandIn())
    threading.Thread(target=read_commands, daemon=True).start()
    threading.Thread(target=flush_periodically, daemon=True).start()
    send('ready', language='python', version=sys.version.split()[0], pid=os.getpid())
    while True:
        try:
            msg = commands.get()
            if msg.get(TAG) == EXEC:
                state.done_sent = False
                run_cell(msg['cell'], msg['code'])
            elif msg.get(TAG) in (SAVE_STATE, LOAD_STATE):
                state.done_sent = False
                run_state(msg['cell'], msg[TAG], msg)
            elif msg.get(TAG) == IMPORT_MODULES:
                import_ahead(msg['cell'], msg['modules'])
        except KeyboardInterrupt:
            # An interrupt that landed while the cell was being wrapped up: it still ends.
            state.running = False
            if not state.done_sent:
                send('done', cell=state.cell, status='interrupted')


main()
