import { create } from '@bufbuild/protobuf';
import {
  ListProcessesResponseSchema,
  ProcessAckSchema,
  ProcessEventSchema,
  ProcessInfoSchema,
  ProcessSignal,
  type ProcessEvent,
  type StartProcessRequest,
} from '@tether/contract';
import type { ProcessSignalName, ProcessStartParams } from '../../../protocol/src/process';
import { invalid } from '../errors';
import type { ProcessService, ProcessStreamEvent } from '../processes/ProcessService';
import { aborted, type GatewayMethods, type StreamSink } from './streams';

type ProcessMethods = Pick<
  GatewayMethods,
  | 'startProcess'
  | 'connectProcess'
  | 'sendProcessInput'
  | 'closeProcessInput'
  | 'signalProcess'
  | 'resizeProcess'
  | 'listProcesses'
>;

const SIGNALS: Partial<Record<ProcessSignal, ProcessSignalName>> = {
  [ProcessSignal.SIGKILL]: 'SIGKILL',
  [ProcessSignal.SIGTERM]: 'SIGTERM',
  [ProcessSignal.SIGINT]: 'SIGINT',
  [ProcessSignal.SIGHUP]: 'SIGHUP',
};

/** The runner's start parameters of a request: with `shell`, the command line runs under `bash -l -c`. */
export function startParams(req: StartProcessRequest): ProcessStartParams {
  if (req.shell && !req.cmd) throw invalid('cmd must not be empty');
  if (req.shell && req.args.length) throw invalid('with shell, the whole command line is cmd: args must be empty');
  const params: ProcessStartParams = req.shell
    ? { cmd: '/bin/bash', args: ['-l', '-c', req.cmd] }
    : { cmd: req.cmd, args: [...req.args] };
  if (req.cwd) params.cwd = req.cwd;
  if (Object.keys(req.env).length) params.env = { ...req.env };
  if (req.pty) params.pty = { cols: req.pty.cols, rows: req.pty.rows };
  if (req.stdin) params.stdin = true;
  if (req.tag) params.tag = req.tag;
  if (req.timeoutMs) params.timeoutMs = req.timeoutMs;
  return params;
}

function toProto(e: ProcessStreamEvent): ProcessEvent {
  switch (e.type) {
    case 'started':
      return create(ProcessEventSchema, { event: { case: 'started', value: { pid: e.pid } } });
    case 'output':
      return create(ProcessEventSchema, { event: { case: e.stream, value: e.data } });
    case 'end':
      return create(ProcessEventSchema, {
        event: {
          case: 'end',
          value: { exitCode: e.end.exitCode, signal: e.end.signal ?? '', error: e.end.error ?? '' },
        },
      });
  }
}

/**
 * Follows one process into `sink` until its end, or until the client goes away: that ends only
 * the watch (its signal is the watch's), never the process.
 */
async function follow(
  sink: StreamSink<ProcessEvent>,
  watch: (deliver: (e: ProcessStreamEvent) => void, signal: AbortSignal) => Promise<unknown>,
): Promise<void> {
  let ended!: () => void;
  const end = new Promise<void>((resolve) => (ended = resolve));
  // Output is delivered as it comes; the transport buffers it (the runner caps a process's output).
  await watch((e) => {
    void sink.send(toProto(e));
    if (e.type === 'end') ended();
  }, sink.signal);
  await Promise.race([end, aborted(sink.signal)]);
}

/** The process RPCs, on the one ProcessService every transport shares. */
export function processMethods(processes: ProcessService): ProcessMethods {
  const ack = () => create(ProcessAckSchema, {});
  return {
    startProcess: (req, tenant, sink) =>
      follow(sink, (deliver, signal) => processes.start(tenant, req.runId, startParams(req), deliver, signal)),

    connectProcess: (req, tenant, sink) =>
      follow(sink, (deliver, signal) => processes.connect(tenant, req.runId, req.pid, deliver, signal)),

    async sendProcessInput(req, tenant) {
      await processes.input(tenant, req.runId, req.pid, req.data);
      return ack();
    },

    async closeProcessInput(req, tenant) {
      await processes.closeInput(tenant, req.runId, req.pid);
      return ack();
    },

    async signalProcess(req, tenant) {
      const signal = SIGNALS[req.signal];
      if (!signal) throw invalid('SignalProcess needs a signal: SIGKILL, SIGTERM, SIGINT or SIGHUP');
      await processes.signal(tenant, req.runId, req.pid, signal);
      return ack();
    },

    async resizeProcess(req, tenant) {
      if (!req.size) throw invalid('ResizeProcess needs a size');
      await processes.resize(tenant, req.runId, req.pid, { cols: req.size.cols, rows: req.size.rows });
      return ack();
    },

    async listProcesses(req, tenant) {
      const list = await processes.list(tenant, req.runId);
      return create(ListProcessesResponseSchema, {
        processes: list.map((p) =>
          create(ProcessInfoSchema, {
            pid: p.pid,
            cmd: p.cmd,
            args: p.args,
            cwd: p.cwd,
            env: p.env,
            tag: p.tag ?? '',
            pty: p.pty,
          }),
        ),
      });
    },
  };
}
