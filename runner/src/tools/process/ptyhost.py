"""Runs one command on a pseudo-terminal and relays it over plain pipes.

Node has no PTY without a native module, and the runner ships none, so the process family
starts this helper (standard library only) for a PTY session:

    python3 ptyhost.py COLS ROWS -- cmd args...

The command runs in a session of its own with the PTY as its controlling terminal (stdin,
stdout and stderr all on it) and TERM=xterm-256color unless the environment names another.
This process relays, unbuffered:

- its stdin to the PTY; when its stdin ends, an EOT (Ctrl-D) goes to the PTY;
- the PTY's output to its stdout;
- fd 3, when open, carries control lines both ways: the runner writes `COLS ROWS` to resize
  the PTY (the kernel sends the command SIGWINCH); this helper writes one line first, `pid N`
  once the command runs, or `error ERRNO message` when it could not start (then exits 127).

It exits when the command does, after the output already written, with the command's exit
status; a command killed by a signal is passed on by this helper dying of the same signal
(or, should that fail, exiting with 128 + the signal's number).
"""

import errno
import fcntl
import os
import resource
import select
import signal
import struct
import subprocess
import sys
import termios
import time

CONTROL_FD = 3
CHUNK = 65536
# Input held for the PTY while the command does not read it; past this, stdin is not read.
MAX_PENDING_INPUT = 1 << 20
# After the command exits: how long its last output may take to arrive, and the most spent on it.
QUIET_SECONDS = 0.05
DRAIN_SECONDS = 1.0


def set_size(fd, cols, rows):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack('HHHH', rows, cols, 0, 0))


def parse_size(cols, rows):
    c, r = int(cols), int(rows)
    if not (0 < c < 65536 and 0 < r < 65536):
        raise ValueError('a size is two numbers from 1 to 65535')
    return c, r


def write_all(fd, data):
    while data:
        n = os.write(fd, data)
        data = data[n:]


def set_nonblocking(fd):
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)


def take_terminal():
    # In the child, after setsid and with the PTY already on fd 0: make it the controlling terminal.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Control:
    """fd 3: resize lines in, one status line out. Absent when the helper is run by hand."""

    def __init__(self):
        try:
            os.fstat(CONTROL_FD)
            self.fd = CONTROL_FD
        except OSError:
            self.fd = -1
        self.buf = b''

    def say(self, line):
        if self.fd >= 0:
            try:
                write_all(self.fd, line.encode('utf-8', 'replace') + b'\n')
            except OSError:
                pass

    def lines(self):
        """What arrived on fd 3, as complete lines; None once it is closed."""
        try:
            data = os.read(self.fd, 4096)
        except BlockingIOError:
            return []
        except OSError:
            data = b''
        if not data:
            self.fd = -1
            return None
        self.buf += data
        *done, self.buf = self.buf.split(b'\n')
        if len(self.buf) > 4096:
            self.buf = b''
        return done


def start(argv, control):
    try:
        if len(argv) < 4 or argv[2] != '--':
            raise ValueError('no command')
        cols, rows = parse_size(argv[0], argv[1])
    except ValueError as e:
        sys.stderr.write(f'usage: ptyhost.py COLS ROWS -- cmd args... ({e})\n')
        sys.exit(2)
    cmd = argv[3:]
    master, slave = os.openpty()
    set_size(master, cols, rows)
    env = dict(os.environ)
    env.setdefault('TERM', 'xterm-256color')
    try:
        child = subprocess.Popen(
            cmd,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
            preexec_fn=take_terminal,
            close_fds=True,
        )
    except (OSError, subprocess.SubprocessError) as e:
        # SubprocessError: taking the terminal failed in the child, before its exec.
        code = errno.errorcode.get(getattr(e, 'errno', None) or 0, 'EIO')
        why = getattr(e, 'strerror', None) or str(e)
        control.say(f'error {code} {why}')
        sys.stderr.write(f'ptyhost: cannot run {cmd[0]}: {why}\n')
        sys.exit(127)
    os.close(slave)
    control.say(f'pid {child.pid}')
    return child, master


def relay(child, master, control):
    """Moves bytes until the command exits; returns its status as Popen reports it."""
    wake_r, wake_w = os.pipe()
    set_nonblocking(wake_r)
    set_nonblocking(wake_w)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    set_nonblocking(master)
    if control.fd >= 0:
        set_nonblocking(control.fd)

    stdin_open = True
    master_open = True
    pending = b''  # input not yet taken by the PTY
    eot = False  # an EOT is owed once pending is written

    while True:
        if child.poll() is not None:
            break
        readers = [wake_r]
        writers = []
        if stdin_open and len(pending) < MAX_PENDING_INPUT:
            readers.append(0)
        if master_open:
            readers.append(master)
            if pending or eot:
                writers.append(master)
        if control.fd >= 0:
            readers.append(control.fd)
        try:
            readable, writable, _ = select.select(readers, writers, [], 1.0)
        except InterruptedError:
            continue
        if wake_r in readable:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        if master in readable:
            try:
                data = os.read(master, CHUNK)
            except BlockingIOError:
                data = None
            except OSError:
                data = b''  # EIO: nothing holds the terminal any more
            if data:
                write_all(1, data)
            elif data == b'':
                master_open = False
        if 0 in readable:
            try:
                data = os.read(0, CHUNK)
            except OSError:
                data = b''
            if data:
                pending += data
            else:
                stdin_open = False
                eot = True
        if master in writable:
            try:
                if pending:
                    n = os.write(master, pending)
                    pending = pending[n:]
                if not pending and eot:
                    os.write(master, b'\x04')
                    eot = False
            except BlockingIOError:
                pass
            except OSError:
                pending, eot = b'', False
        if control.fd >= 0 and control.fd in readable:
            lines = control.lines()
            for line in lines or []:
                try:
                    cols, rows = parse_size(*line.split())
                    set_size(master, cols, rows)
                except (ValueError, TypeError, OSError):
                    pass

    # The command is gone. What it wrote last may still be on its way through the terminal's
    # buffers: read until the PTY reports that nothing holds it (EIO) or stays quiet a moment,
    # and never longer than DRAIN_SECONDS for something it left running in the background.
    deadline = time.monotonic() + DRAIN_SECONDS
    while master_open and time.monotonic() < deadline:
        if not select.select([master], [], [], QUIET_SECONDS)[0]:
            break
        try:
            data = os.read(master, CHUNK)
        except BlockingIOError:
            continue
        except OSError:
            break
        if not data:
            break
        write_all(1, data)
    return child.returncode


def main(argv):
    control = Control()
    child, master = start(argv, control)
    try:
        status = relay(child, master, control)
    except BrokenPipeError:
        # The runner stopped reading: nothing left to relay to.
        status = child.wait()
    if status is None:
        status = child.wait()
    if status >= 0:
        return status
    sig = -status
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(sig, signal.SIG_DFL)
        sys.stdout.flush()
        os.kill(os.getpid(), sig)
    except (OSError, ValueError):
        pass
    return 128 + sig


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
