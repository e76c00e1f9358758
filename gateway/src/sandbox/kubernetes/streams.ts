import * as querystring from 'node:querystring';
import { PassThrough, Writable, type Readable } from 'node:stream';
import type { KubeConfig, V1Status } from '@kubernetes/client-node';
// Not re-exported by the package's index; the module is part of its published API surface.
import { WebSocketHandler } from '@kubernetes/client-node/dist/web-socket-handler';

type Socket = Awaited<ReturnType<WebSocketHandler['connect']>>;

/** Channel numbers of the Kubernetes streaming protocol (`v4`/`v5.channel.k8s.io`). */
const STDIN = 0;
const STDOUT = 1;
const STDERR = 2;
const STATUS = 3;
/** v5 only: "this stream is closed", the way to send EOF on stdin without closing the socket. */
const CLOSE = 255;
const MAX_STDERR = 16 * 1024;

/** A process's stdio through the API server (exec or attach), as plain Node streams. */
export interface PodStream {
  stdin: Writable;
  stdout: Readable;
  /** What the process wrote on stderr (the first 16 KiB), when stderr was asked for. */
  stderr(): string;
  /** The API server's final status: the exit of an exec'd process, or why the stream ended. */
  readonly done: Promise<V1Status>;
  close(): void;
}

export interface StreamTarget {
  namespace: string;
  pod: string;
  container: string;
}

/**
 * Opens `pods/exec` with stdin, stdout and stderr. The client library's own exec handler
 * closes the whole socket when stdin ends (so the exit status is lost) and throws on the v5
 * close frame; this one sends EOF as a v5 close frame and keeps reading until the status.
 */
export function openExec(kc: KubeConfig, target: StreamTarget, command: string[]): Promise<PodStream> {
  const query = querystring.stringify({
    stdin: true,
    stdout: true,
    stderr: true,
    tty: false,
    command,
    container: target.container,
  });
  return open(kc, `/api/v1/namespaces/${target.namespace}/pods/${target.pod}/exec?${query}`, true);
}

/** Opens `pods/attach` to a container's main process: its stdin and stdout. */
export function openAttach(kc: KubeConfig, target: StreamTarget): Promise<PodStream> {
  const query = querystring.stringify({
    stdin: true,
    stdout: true,
    stderr: false,
    tty: false,
    container: target.container,
  });
  return open(kc, `/api/v1/namespaces/${target.namespace}/pods/${target.pod}/attach?${query}`, false);
}

async function open(kc: KubeConfig, path: string, withStderr: boolean): Promise<PodStream> {
  const stdout = new PassThrough();
  const stderrChunks: Buffer[] = [];
  let stderrBytes = 0;
  let settle!: (s: V1Status) => void;
  const done = new Promise<V1Status>((resolve) => (settle = resolve));
  let finished = false;
  const finish = (status: V1Status) => {
    if (finished) return;
    finished = true;
    stdout.end();
    settle(status);
  };
  const ws: Socket = await new WebSocketHandler(kc).connect(path, null, (channel, data) => {
    if (channel === STDOUT) stdout.write(Buffer.from(data));
    else if (channel === STDERR && withStderr && stderrBytes < MAX_STDERR) {
      stderrChunks.push(Buffer.from(data));
      stderrBytes += data.length;
    } else if (channel === STATUS) {
      try {
        finish(JSON.parse(data.toString('utf8')) as V1Status);
      } catch {
        finish({ status: 'Failure', message: 'unreadable status from the API server' });
      }
      return false;
    }
    // CLOSE (255) and anything else: nothing to do; the status or the socket's end follows.
    return true;
  });
  ws.on('close', (code: number, reason: Buffer) =>
    finish({ status: 'Failure', message: `the stream closed (${code}${reason?.length ? `: ${reason}` : ''})` }),
  );
  ws.on('error', (err: Error) => finish({ status: 'Failure', message: err.message }));
  const v5 = ws.protocol === 'v5.channel.k8s.io';
  const send = (frame: Buffer, cb: (err?: Error) => void) => {
    if (ws.readyState !== ws.OPEN) return cb();
    ws.send(frame, (err?: Error) => cb(err ?? undefined));
  };
  const stdin = new Writable({
    write(chunk: Buffer, _enc, cb) {
      send(Buffer.concat([Buffer.from([STDIN]), chunk]), cb);
    },
    final(cb) {
      if (v5) send(Buffer.from([CLOSE, STDIN]), cb);
      else cb();
    },
  });
  stdin.on('error', () => undefined);
  return {
    stdin,
    stdout,
    stderr: () => Buffer.concat(stderrChunks).toString('utf8'),
    done,
    close: () => {
      ws.close();
      finish({ status: 'Failure', message: 'closed by the gateway' });
    },
  };
}

/** The exit code an exec status names (0 on Success), or null when it names none. */
export function exitCodeOf(status: V1Status): number | null {
  if (status.status === 'Success') return 0;
  const cause = status.details?.causes?.find((c) => c.reason === 'ExitCode');
  return cause?.message !== undefined && /^\d+$/.test(cause.message) ? Number(cause.message) : null;
}
