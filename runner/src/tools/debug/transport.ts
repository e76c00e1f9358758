import { spawn, type ChildProcess } from 'node:child_process';
import * as net from 'node:net';
import { DapClient, type ReverseRequestHandler } from './dapClient';
import type { AdapterCommand } from './adapters';
import type { OutputChunk } from './outputBuffer';
import { nameChild } from '../../oom/children';
import { TextTail } from '../../util/cappedTail';

const STDERR_TAIL = 4096;
const LISTEN_TIMEOUT_MS = 15_000;

/** A live connection to a debug adapter, and the process behind it when tether started one. */
export interface AdapterConnection {
  client: DapClient;
  pid?: number;
  /** Resolves once, with a readable reason, when the connection (and process) is gone. */
  ended: Promise<string>;
  /** The adapter's last words on stderr, for a crash report. */
  stderrTail(): string;
  /** Ends the adapter and everything it started (its process group). */
  kill(): void;
}

type ProgramOutput = (category: OutputChunk['category'], text: string) => void;

function killGroup(proc: ChildProcess): void {
  if (proc.pid === undefined) return;
  try {
    // The adapter runs in its own process group: the debuggee and helpers it spawned go too,
    // even when the adapter itself is already gone (killed, crashed) and left them behind.
    process.kill(-proc.pid, 'SIGKILL');
  } catch {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
  }
}

function exitReason(code: number | null, signal: NodeJS.Signals | null): string {
  return signal ? `the debug adapter was killed by ${signal}` : `the debug adapter exited with code ${code}`;
}

/** Starts an adapter process and connects a DAP client to it (its stdio, or the port it prints). */
export async function startAdapter(
  cmd: AdapterCommand,
  cwd: string,
  reverse: ReverseRequestHandler,
  programOutput: ProgramOutput,
): Promise<AdapterConnection> {
  const proc = spawn(cmd.command, cmd.args, { cwd, env: cmd.env, stdio: ['pipe', 'pipe', 'pipe'], detached: true });
  nameChild(proc, 'the debug adapter', cmd.command.split('/').pop());
  const tail = new TextTail(STDERR_TAIL);
  const spawned = new Promise<void>((resolve, reject) => {
    proc.once('spawn', () => resolve());
    proc.once('error', (err) => reject(new Error(`cannot start ${cmd.command}: ${err.message}`)));
  });
  const exited = new Promise<string>((resolve) => {
    proc.once('exit', (code, signal) => resolve(exitReason(code, signal)));
    proc.once('error', (err) => resolve(`the debug adapter failed: ${err.message}`));
  });
  await spawned;
  proc.stdin!.on('error', () => undefined);

  if (cmd.transport === 'stdio') {
    proc.stderr!.on('data', (d: Buffer) => tail.push(d.toString()));
    const ended = exited.then((r) => withTail(r, tail.text().trim()));
    const client = new DapClient(proc.stdout!, proc.stdin!, reverse, ended);
    void ended.then((reason) => client.close(reason));
    return { client, pid: proc.pid, ended, stderrTail: () => tail.text().trim(), kill: () => killGroup(proc) };
  }

  // `listen`: the adapter announces its port on stdout; what follows there is the debuggee's.
  const port = await new Promise<number>((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(
      () => fail(`${cmd.command} did not announce a port within ${LISTEN_TIMEOUT_MS / 1000}s`),
      LISTEN_TIMEOUT_MS,
    );
    const fail = (why: string) => {
      clearTimeout(timer);
      proc.stdout!.off('data', onData);
      killGroup(proc);
      reject(new Error(withTail(why, tail.text().trim() + seen)));
    };
    const onData = (d: Buffer) => {
      seen += d.toString();
      const m = /listening at:?\s*\[?[\w.:]*?\]?:(\d+)/i.exec(seen);
      if (!m) return;
      clearTimeout(timer);
      proc.stdout!.off('data', onData);
      const rest = seen.slice(seen.indexOf('\n', m.index) + 1);
      if (rest) programOutput('stdout', rest);
      proc.stdout!.on('data', (chunk: Buffer) => programOutput('stdout', chunk.toString()));
      resolve(Number(m[1]));
    };
    proc.stdout!.on('data', onData);
    proc.stderr!.on('data', (d: Buffer) => tail.push(d.toString()));
    void exited.then((reason) => fail(reason));
  });
  proc.stderr!.on('data', (d: Buffer) => programOutput('stderr', d.toString()));
  let socket: net.Socket;
  try {
    socket = await connectSocket(port);
  } catch (err) {
    killGroup(proc);
    throw err;
  }
  const client = new DapClient(socket, socket, reverse);
  const ended = Promise.race([
    exited,
    new Promise<string>((resolve) => socket.once('close', () => resolve('the debug adapter closed its connection'))),
  ]);
  void ended.then((reason) => client.close(withTail(reason, tail.text().trim())));
  return {
    client,
    pid: proc.pid,
    ended: ended.then((r) => withTail(r, tail.text().trim())),
    stderrTail: () => tail.text().trim(),
    kill: () => {
      socket.destroy();
      killGroup(proc);
    },
  };
}

/** Connects to a port that already speaks DAP (a headless debugger started by someone else). */
export async function connectDirect(port: number, reverse: ReverseRequestHandler): Promise<AdapterConnection> {
  const socket = await connectSocket(port);
  const client = new DapClient(socket, socket, reverse);
  const ended = new Promise<string>((resolve) =>
    socket.once('close', () => resolve(`the debugger on port ${port} closed the connection`)),
  );
  void ended.then((reason) => client.close(reason));
  return { client, ended, stderrTail: () => '', kill: () => socket.destroy() };
}

function connectSocket(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    socket.setNoDelay(true);
    socket.once('connect', () => {
      socket.off('error', reject);
      socket.on('error', () => undefined);
      resolve(socket);
    });
    socket.once('error', (err) => reject(new Error(`cannot connect to 127.0.0.1:${port}: ${err.message}`)));
  });
}

function withTail(reason: string, tail: string): string {
  return tail ? `${reason}; its last output:\n${tail.slice(-1500)}` : reason;
}
