import { status } from '@grpc/grpc-js';
import {
  ProcessCloseStdinCommand,
  ProcessInputCommand,
  ProcessListCommand,
  ProcessResizeCommand,
  ProcessSignalCommand,
  ProcessStartCommand,
  type ProcessEndPayload,
  type ProcessInfo,
  type ProcessRefusal,
  type ProcessReply,
  type ProcessSignalName,
  type ProcessStartParams,
  type ProcessStream,
  type PtySize,
} from '../../../protocol/src/process';
import { GatewayError, invalid, notFound } from '../errors';
import type { ReadyRun } from '../runs/RunRecord';
import type { RunnerClient } from '../runs/RunnerClient';
import { ProcessHub, type ProcessWatcher } from './ProcessHub';

/** What one watcher of a process receives, in order: output, then exactly one end. */
export type ProcessStreamEvent =
  | { type: 'started'; pid: number }
  | { type: 'output'; stream: ProcessStream; data: Buffer }
  | { type: 'end'; end: ProcessEndPayload };

export interface ProcessRuns {
  /** The run, READY; a paused one is resumed first. */
  ready(tenant: string, runId: string): ReadyRun | Promise<ReadyRun>;
}

const MAX_SIZE = 1000;

/** A refusal of the runner's, as the status every transport answers it with. */
function refusalError(r: ProcessRefusal): GatewayError {
  switch (r.code) {
    case 'not_found':
      return notFound(r.message);
    case 'invalid':
      return invalid(r.message);
    case 'limit':
      return new GatewayError(status.RESOURCE_EXHAUSTED, r.message);
    default:
      return new GatewayError(status.FAILED_PRECONDITION, r.message);
  }
}

function ack(reply: ProcessReply): void {
  if (!reply.ok) throw refusalError(reply);
}

function checkSize(size: PtySize): PtySize {
  if (!Number.isInteger(size.cols) || !Number.isInteger(size.rows) || size.cols < 1 || size.rows < 1)
    throw invalid('a PTY needs cols and rows of at least 1');
  if (size.cols > MAX_SIZE || size.rows > MAX_SIZE) throw invalid(`a PTY is at most ${MAX_SIZE}×${MAX_SIZE}`);
  return size;
}

/**
 * Processes of a run, for every transport alike (gRPC, Connect, the E2B surface): start one and
 * follow its output, follow one already running, feed, signal and resize it. The processes live
 * in the runner; this holds only who watches which of them.
 */
export class ProcessService {
  private readonly hubs = new WeakMap<RunnerClient, ProcessHub>();

  constructor(private readonly runs: ProcessRuns) {}

  private async run(tenant: string, runId: string): Promise<ReadyRun> {
    const run = await this.runs.ready(tenant, runId);
    if (!run.spec.features.commands)
      throw new GatewayError(
        status.FAILED_PRECONDITION,
        `run ${runId} was created without features.commands: it runs no processes`,
      );
    return run;
  }

  private hub(runner: RunnerClient): ProcessHub {
    let hub = this.hubs.get(runner);
    if (!hub) this.hubs.set(runner, (hub = new ProcessHub(runner)));
    return hub;
  }

  /**
   * Starts a process and delivers its events to `deliver` until its end (or `signal` aborts
   * the watch, which leaves the process running). Resolves with the pid once it started.
   */
  async start(
    tenant: string,
    runId: string,
    params: ProcessStartParams,
    deliver: (e: ProcessStreamEvent) => void,
    signal?: AbortSignal,
  ): Promise<number> {
    if (!params.cmd) throw invalid('cmd must not be empty');
    if (params.pty) checkSize(params.pty);
    const run = await this.run(tenant, runId);
    const hub = this.hub(run.runner);
    // Watching begins before the start: output the process writes at once is not lost.
    const pending = hub.expectStart();
    let reply;
    try {
      reply = await run.runner.command(ProcessStartCommand.type, params);
    } catch (err) {
      pending.cancel();
      throw err;
    }
    if (!reply.ok) {
      pending.cancel();
      throw refusalError(reply);
    }
    deliver({ type: 'started', pid: reply.pid });
    this.follow(pending.claim(reply.pid, watcherFor(deliver)), signal);
    return reply.pid;
  }

  /** Delivers the events of a running process from now on; NOT_FOUND once it has ended. */
  async connect(
    tenant: string,
    runId: string,
    pid: number,
    deliver: (e: ProcessStreamEvent) => void,
    signal?: AbortSignal,
  ): Promise<void> {
    const run = await this.run(tenant, runId);
    const { processes } = await run.runner.command(ProcessListCommand.type, {});
    if (!processes.some((p) => p.pid === pid)) throw notFound(`no running process ${pid} in run ${runId}`);
    this.follow(this.hub(run.runner).watch(pid, watcherFor(deliver)), signal);
  }

  private follow(unwatch: () => void, signal?: AbortSignal): void {
    if (!signal) return;
    if (signal.aborted) unwatch();
    else signal.addEventListener('abort', unwatch, { once: true });
  }

  async input(tenant: string, runId: string, pid: number, data: Uint8Array): Promise<void> {
    const run = await this.run(tenant, runId);
    ack(await run.runner.command(ProcessInputCommand.type, { pid, data: Buffer.from(data).toString('base64') }));
  }

  async closeInput(tenant: string, runId: string, pid: number): Promise<void> {
    const run = await this.run(tenant, runId);
    ack(await run.runner.command(ProcessCloseStdinCommand.type, { pid }));
  }

  async signal(tenant: string, runId: string, pid: number, sig: ProcessSignalName): Promise<void> {
    const run = await this.run(tenant, runId);
    ack(await run.runner.command(ProcessSignalCommand.type, { pid, signal: sig }));
  }

  async resize(tenant: string, runId: string, pid: number, size: PtySize): Promise<void> {
    checkSize(size);
    const run = await this.run(tenant, runId);
    ack(await run.runner.command(ProcessResizeCommand.type, { pid, size }));
  }

  async list(tenant: string, runId: string): Promise<ProcessInfo[]> {
    const run = await this.run(tenant, runId);
    return (await run.runner.command(ProcessListCommand.type, {})).processes;
  }
}

function watcherFor(deliver: (e: ProcessStreamEvent) => void): ProcessWatcher {
  return {
    output: (stream, data) => deliver({ type: 'output', stream, data }),
    end: (end) => deliver({ type: 'end', end }),
  };
}
