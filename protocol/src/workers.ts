/**
 * What the vibe family exchanges with the gateway outside of tool calls: worker events for
 * `client`-backed workers (runner → gateway, relayed on WatchWorkers) and the commands the
 * gateway sends back (watchers connected, ReportWorker).
 */
import { FamilyCommand, RunEventType } from './run';

export const VIBE_FAMILY = 'vibe';

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

/** runner → gateway: a client worker started, got a message or was killed. */
export namespace WorkerEvent {
  export const type = new RunEventType<WorkerEventPayload>('vibe.worker');
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

/** gateway → runner: the number of watchers changed; answers with the snapshot a new one starts from. */
export namespace WatchersCommand {
  export const type = new FamilyCommand<WatchersPayload, WatchSnapshot>(VIBE_FAMILY, 'watchers');
}

/** Command `report`: ReportWorker as the runner receives it. */
export interface ReportPayload {
  workerId: string;
  status: WorkerStatus;
  text: string;
}

export type ReportReply =
  | { ok: true }
  | { ok: false; code: 'not_found' | 'not_client' | 'settled' | 'invalid'; message: string };

/** gateway → runner: ReportWorker, progress or the result that settles a client worker's round. */
export namespace ReportCommand {
  export const type = new FamilyCommand<ReportPayload, ReportReply>(VIBE_FAMILY, 'report');
}
