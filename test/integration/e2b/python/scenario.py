"""E2B's Python SDKs, unchanged, driving a tether gateway.

Configured only as E2B's users configure them: E2B_API_URL and E2B_SANDBOX_URL point at the
gateway's HTTP listener, E2B_API_KEY is a tether token. Each check prints one JSON line; any
failure raises, and the exit code says so.
"""

import json
import os
import sys
import time

from e2b import CommandExitException, NotFoundException, PtySize, SandboxException
from e2b_code_interpreter import Sandbox


def check(name, **facts):
    print(json.dumps({"check": name, **facts}), flush=True)


def until(what, fn, seconds=15.0):
    end = time.time() + seconds
    while time.time() < end:
        value = fn()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def main():
    started = time.time()
    sbx = Sandbox.create(timeout=600, metadata={"suite": "e2b-python"})
    check("create", sandbox_id=sbx.sandbox_id, ms=round((time.time() - started) * 1000))
    try:
        files(sbx)
        watch(sbx)
        commands(sbx)
        pty(sbx)
        code(sbx)
        bad_inputs(sbx)
        pause_and_resume(sbx)
    finally:
        sbx.kill()
    assert sbx.sandbox_id not in [s.sandbox_id for s in Sandbox.list().next_items()]
    check("kill")


def files(sbx):
    info = sbx.files.write("/home/user/hello.txt", "hello from e2b\n")
    assert info.path == "/home/user/hello.txt", info.path
    assert sbx.files.read("/home/user/hello.txt") == "hello from e2b\n"
    sbx.files.write("data/blob.bin", bytes(range(256)) * 4)
    assert bytes(sbx.files.read("data/blob.bin", format="bytes")) == bytes(range(256)) * 4
    sbx.files.write_files([{"path": "multi/a.txt", "data": "A"}, {"path": "multi/b.txt", "data": "B"}])
    names = sorted(e.name for e in sbx.files.list("/home/user/multi"))
    assert names == ["a.txt", "b.txt"], names
    assert sbx.files.make_dir("/home/user/made/deep") is True
    assert sbx.files.make_dir("/home/user/made/deep") is False
    moved = sbx.files.rename("/home/user/hello.txt", "/home/user/made/hello.txt")
    assert moved.path == "/home/user/made/hello.txt", moved.path
    assert sbx.files.exists("/home/user/made/hello.txt")
    assert not sbx.files.exists("/home/user/hello.txt")
    info = sbx.files.get_info("/home/user/made/hello.txt")
    assert info.size == len("hello from e2b\n"), info.size
    sbx.files.remove("/home/user/made")
    assert not sbx.files.exists("/home/user/made")
    # The same files, seen by a command in the sandbox: E2B's home is the workspace.
    out = sbx.commands.run("cat /home/user/multi/a.txt; cat multi/b.txt").stdout
    assert out == "AB", out
    check("files")


def watch(sbx):
    sbx.files.make_dir("/home/user/watched")
    handle = sbx.files.watch_dir("/home/user/watched", recursive=True)
    try:
        sbx.commands.run("mkdir -p watched/sub && echo x > watched/sub/new.txt")
        sbx.files.write("/home/user/watched/by-sdk.txt", "y")
        seen = []

        def both():
            seen.extend(handle.get_new_events())
            names = {e.name for e in seen}
            return "sub/new.txt" in names and "by-sdk.txt" in names

        until("the watch's events", both)
    finally:
        handle.stop()
    check("watch", events=len(seen))


def commands(sbx):
    r = sbx.commands.run("echo out; echo err >&2")
    assert (r.stdout, r.stderr, r.exit_code) == ("out\n", "err\n", 0), (r.stdout, r.stderr, r.exit_code)
    try:
        sbx.commands.run("echo failing; exit 3")
        raise AssertionError("a non-zero exit should raise")
    except CommandExitException as e:
        assert e.exit_code == 3 and e.stdout == "failing\n", (e.exit_code, e.stdout)
    chunks = []
    sbx.commands.run("for i in 1 2 3; do echo line$i; sleep 0.05; done", on_stdout=chunks.append)
    assert "".join(chunks) == "line1\nline2\nline3\n", chunks
    r = sbx.commands.run("echo $GREETING; pwd", envs={"GREETING": "hi"}, cwd="/home/user/multi")
    assert r.stdout.split("\n")[0] == "hi", r.stdout
    bg = sbx.commands.run("sleep 300", background=True)
    assert bg.pid in [p.pid for p in sbx.commands.list()]
    assert bg.kill() is True
    until("the killed command to be gone", lambda: bg.pid not in [p.pid for p in sbx.commands.list()])
    cat = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.send_stdin(cat.pid, "through stdin\n")
    sbx.commands.close_stdin(cat.pid)
    res = cat.wait()
    assert res.stdout == "through stdin\n", res.stdout
    check("commands")


def pty(sbx):
    out = bytearray()
    handle = sbx.pty.create(PtySize(rows=24, cols=80))
    sbx.pty.resize(handle.pid, PtySize(rows=30, cols=100))
    sbx.pty.send_stdin(handle.pid, b"stty size; echo pty-$((40+2)); exit\n")
    handle.wait(on_pty=lambda data: out.extend(data))
    text = out.decode(errors="replace")
    assert "30 100" in text and "pty-42" in text, text
    check("pty")


def code(sbx):
    assert sbx.run_code("x = 41\nx + 1").text == "42"
    printed = sbx.run_code("print('printed')\n7")
    assert printed.logs.stdout == ["printed\n"], printed.logs.stdout
    assert printed.text == "7"
    df = sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
    assert df.results and "a" in df.results[-1].text and "y" in df.results[-1].text, df.results
    fig = sbx.run_code(
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [1, 4, 9])\nplt.show()"
    )
    pngs = [r.png for r in fig.results if r.png]
    assert pngs and pngs[0].startswith("iVBOR"), fig.results
    err = sbx.run_code("1 / 0")
    assert err.error is not None and err.error.name == "ZeroDivisionError", err.error
    js = sbx.run_code("const y = 20; y * 2", language="javascript")
    assert js.text == "40", js.text
    check("run_code")


def bad_inputs(sbx):
    try:
        Sandbox.connect("no-such-sandbox")
        raise AssertionError("an unknown sandbox should be not found")
    except NotFoundException:
        pass
    try:
        Sandbox.connect(sbx.sandbox_id, api_key=os.environ["OTHER_TENANT_KEY"])
        raise AssertionError("another tenant's sandbox should be not found")
    except NotFoundException:
        pass
    try:
        sbx.files.read("/etc/passwd")
        raise AssertionError("a path outside the workspace should be refused")
    except SandboxException as e:
        assert "outside" in str(e), str(e)
    try:
        sbx.files.write("../escape.txt", "no")
        raise AssertionError("a relative escape should be refused")
    except SandboxException as e:
        assert "outside" in str(e), str(e)
    try:
        sbx.commands.run("head -c 100000000 /dev/zero | tr '\\0' a")
        raise AssertionError("a huge output should end the command")
    except CommandExitException as e:
        assert "output exceeded" in (e.error or ""), e.error
    # The sandbox still answers.
    assert sbx.commands.run("echo alive").stdout == "alive\n"
    check("bad_inputs")


def pause_and_resume(sbx):
    sbx.run_code("kept = 'still here'")
    # A polled watcher does not outlive its sandbox's pause: the next poll says it ended.
    watcher = sbx.files.watch_dir("/home/user", recursive=False)
    assert sbx.pause() is True
    assert [s.state for s in Sandbox.list().next_items() if s.sandbox_id == sbx.sandbox_id] == ["paused"]
    started = time.time()
    again = Sandbox.connect(sbx.sandbox_id)
    assert again.run_code("kept").text == "'still here'"
    resume_ms = round((time.time() - started) * 1000)
    try:
        watcher.get_new_events()
        raise AssertionError("a watcher from before the pause still answered")
    except NotFoundException as e:
        assert "ended" in str(e), str(e)
    check("pause_resume", resume_ms=resume_ms)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - the test reads the reason
        print(json.dumps({"failed": f"{type(e).__name__}: {e}"}), flush=True)
        raise
    sys.exit(0)
