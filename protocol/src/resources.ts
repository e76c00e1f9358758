/**
 * The long-lived processes a run keeps (language servers, eval kernels) as the runner reports
 * them to the gateway, for the resource metrics. The runner sends the whole picture, with
 * cumulative counts, whenever it changes: a missed event loses nothing but timeliness, and a
 * gateway that connects later is sent it once on initialize.
 */
import { RunEventType } from './run';

export type ResourceKind = 'language_server' | 'kernel';

export interface ResourceCounts {
  kind: ResourceKind;
  /** A language server's id (pyright, typescript, ...) or a kernel's language (python, javascript). */
  name: string;
  /** Processes of this kind and name alive now. */
  alive: number;
  /** Processes started so far, restarts included. */
  starts: number;
  /** Starts that replaced one that crashed or died. */
  restartsAfterCrash: number;
  /** Starts that replaced one stopped on request (lsp reload, eval reset). */
  restartsRequested: number;
}

export interface ResourcesPayload {
  resources: ResourceCounts[];
  /** True when re-sent to a gateway that just connected: counts up to now are history, not news. */
  replay?: boolean;
}

/** runner → gateway: the run's language servers and kernels changed (one started, stopped or died). */
export namespace ResourcesEvent {
  export const type = new RunEventType<ResourcesPayload>('run.resources');
}
