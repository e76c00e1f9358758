/**
 * What code in a run can do to the processes holding the runner's stdio, tried from an `eval`
 * cell (a tool's user's position): open PID 1's and the runner's descriptors, list them, read
 * their environment, and write a framed `runner/shutdown` into their stdin and stdout. The cell
 * prints one JSON line; each attempt is `ok`, `written` or the errno's name.
 */
/** The runner's script in its image, as its command line names it (scripts/build.sh bundles it). */
export const RUNNER_SCRIPT = '/opt/tether/dist/runner/src/main.bundle.js';

export const PID1_PROBE = String.raw`
import errno, glob, json, os

def runner_pid():
    for d in glob.glob('/proc/[0-9]*'):
        try:
            if open(d + '/cmdline', 'rb').read().split(b'\0')[1:2] == [b'${RUNNER_SCRIPT}']:
                return d.split('/')[-1]
        except OSError:
            pass

def attempt(fn):
    try:
        return fn() or 'ok'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

def open_fd(path, flags):
    os.close(os.open(path, flags | os.O_NONBLOCK))

body = json.dumps({'jsonrpc': '2.0', 'id': 1, 'method': 'runner/shutdown', 'params': {}}).encode()
frame = b'Content-Length: %d\r\n\r\n' % len(body) + body

def inject(path):
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(fd, frame)
    finally:
        os.close(fd)
    return 'written'

out = {'init': open('/proc/1/cmdline', 'rb').read().split(b'\0')[0].decode()}
for name, pid in (('init', '1'), ('runner', runner_pid())):
    for n in ('0', '1', '2'):
        out[name + ' fd' + n] = attempt(lambda: open_fd('/proc/%s/fd/%s' % (pid, n), os.O_RDONLY))
    out[name + ' fd list'] = attempt(lambda: os.listdir('/proc/%s/fd' % pid) and None)
    out[name + ' environ'] = attempt(lambda: open('/proc/%s/environ' % pid, 'rb').read() and None)
    out[name + ' stdin write'] = attempt(lambda: inject('/proc/%s/fd/0' % pid))
    out[name + ' stdout write'] = attempt(lambda: inject('/proc/%s/fd/1' % pid))
print('PID1PROBE ' + json.dumps(out))
`;

/** The probe's findings, from the cell's output. */
export function pid1Findings(said: string): Record<string, string> {
  const line = said.split('\n').find((l) => l.startsWith('PID1PROBE '));
  if (!line) throw new Error(`the probe printed no findings:\n${said}`);
  return JSON.parse(line.slice('PID1PROBE '.length)) as Record<string, string>;
}
