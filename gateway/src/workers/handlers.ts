import { create } from '@bufbuild/protobuf';
import { status } from '@grpc/grpc-js';
import {
  ReportWorkerResponseSchema,
  WorkerEventKind,
  WorkerEventSchema,
  WorkerStatus,
  type ReportWorkerRequest,
  type ReportWorkerResponse,
  type WorkerEvent,
} from '@tether/contract';
import {
  ReportCommand,
  type ReportReply,
  type WorkerEventPayload,
  type WorkerStatus as RunnerWorkerStatus,
} from '../../../protocol/src/workers';
import { GatewayError, invalid, notFound } from '../errors';
import { aborted, type GatewayMethods } from '../grpc/streams';
import type { ReadyRun } from '../runs/RunRecord';
import type { RunRegistry } from '../runs/RunRegistry';
import { WorkerWatch } from './WorkerWatch';

const KIND: Record<WorkerEventPayload['kind'], WorkerEventKind> = {
  START: WorkerEventKind.START,
  SEND: WorkerEventKind.SEND,
  KILL: WorkerEventKind.KILL,
};

const STATUS: Partial<Record<WorkerStatus, RunnerWorkerStatus>> = {
  [WorkerStatus.RUNNING]: 'running',
  [WorkerStatus.DONE]: 'done',
  [WorkerStatus.FAILED]: 'failed',
  [WorkerStatus.KILLED]: 'killed',
};

const REPLY_CODE: Record<Exclude<ReportReply, { ok: true }>['code'], status> = {
  not_found: status.NOT_FOUND,
  not_client: status.FAILED_PRECONDITION,
  settled: status.FAILED_PRECONDITION,
  invalid: status.INVALID_ARGUMENT,
};

function toProto(e: WorkerEventPayload): WorkerEvent {
  return create(WorkerEventSchema, {
    kind: KIND[e.kind],
    workerId: e.workerId,
    label: e.label,
    tier: e.tier,
    brief: e.brief,
    message: e.message ?? '',
  });
}

function vibeRun(runs: Pick<RunRegistry, 'ready'>, tenant: string, runId: string): ReadyRun {
  const run = runs.ready(tenant, runId);
  if (!run.spec.features.vibe)
    throw new GatewayError(status.FAILED_PRECONDITION, `run ${runId} was created without vibe mode; it has no workers`);
  return run;
}

/**
 * WatchWorkers and ReportWorker: how a platform runs `client`-backed vibe workers. Both are
 * tenant-checked like every RPC: another tenant's run does not exist for the caller.
 */
export function workerMethods(runs: Pick<RunRegistry, 'ready'>): Pick<GatewayMethods, 'watchWorkers' | 'reportWorker'> {
  const watch = new WorkerWatch();

  return {
    async watchWorkers(req, tenant, sink) {
      const run = vibeRun(runs, tenant, req.runId);
      const unsubscribe = await watch.of(run.runner).add((e) => void sink.send(toProto(e)));
      try {
        if (sink.signal.aborted) return;
        // The stream is live: client workers can be spawned from now on.
        sink.ready();
        // The stream ends with the run, or when the client goes away.
        await Promise.race([run.sandbox.exited, aborted(sink.signal)]);
      } finally {
        unsubscribe();
      }
    },

    async reportWorker(req: ReportWorkerRequest, tenant): Promise<ReportWorkerResponse> {
      const run = vibeRun(runs, tenant, req.runId);
      if (!req.workerId) throw invalid('ReportWorker needs a worker_id');
      const st = STATUS[req.status];
      if (!st) throw invalid('ReportWorker needs a status: RUNNING (progress), DONE, FAILED or KILLED');
      const reply = await run.runner.command(ReportCommand.type, {
        workerId: req.workerId,
        status: st,
        text: req.text,
      });
      if (!reply.ok)
        throw reply.code === 'not_found'
          ? notFound(reply.message)
          : new GatewayError(REPLY_CODE[reply.code], reply.message);
      return create(ReportWorkerResponseSchema, {});
    },
  };
}
