/**
 * What the vibe family exchanges with the gateway outside of tool calls: worker events for
 * `client`-backed workers (runner → gateway, relayed on WatchWorkers) and the commands the
 * gateway sends back (watchers connected, ReportWorker).
 */

export const VIBE_FAMILY = 'vibe';
/** The run event kind that carries a WorkerEventPayload. */
export const WORKER_EVENT = 'vibe.worker';

export type WorkerTier = 'fast' | 'good';
export type WorkerStatus = 'running' | 'done' | 'failed' | 'killed';
export type WorkerEventKind = 'START' | 'SEND' | 'KILL';

export interface WorkerEventPayload {
  /** Increases by one per event of this run, so a watcher can drop what a snapshot already holds. */
  seq: number;
  kind: WorkerEventKind;
  workerId: string;
  label: string;
  tier: WorkerTier;
  /** The whole brief so far. */
  brief: string;
  /** The appended message, for SEND. */
  message?: string;
}

/** Command `watchers`: how many platform streams watch this run now. */
export interface WatchersPayload {
  count: number;
}

/** Answer to `watchers`: a START for every running client worker, as of event `seq`. */
export interface WatchSnapshot {
  seq: number;
  events: WorkerEventPayload[];
}

/** Command `report`: ReportWorker as the runner receives it. */
export interface ReportPayload {
  workerId: string;
  status: WorkerStatus;
  text: string;
}

export type ReportReply = { ok: true } | { ok: false; code: 'not_found' | 'not_client' | 'settled' | 'invalid'; message: string };
