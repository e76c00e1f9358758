import { status } from '@grpc/grpc-js';
import {
  FsListCommand,
  FsMakeDirCommand,
  FsMoveCommand,
  FsReadCommand,
  FsRemoveCommand,
  FsStatCommand,
  FsUnwatchCommand,
  FsWatchCommand,
  FsWatchEvent,
  type FsEntry,
  type FsRefusal,
  type FsReply,
  type FsWatchEventPayload,
} from '../../../protocol/src/fs';
import type { FamilyCommand } from '../../../protocol/src/run';
import { GatewayError, invalid, notFound } from '../errors';
import type { RunPauses } from '../runs/RunPauses';
import type { ReadyRun } from '../runs/RunRecord';
import type { RunRegistry } from '../runs/RunRegistry';
import type { RunnerClient } from '../runs/RunnerClient';
import { toWorkspace } from './paths';
import type { SandboxTokens } from './tokens';

/** A runner's fs refusal as the status every E2B transport answers it with. */
export function fsError(r: FsRefusal): GatewayError {
  switch (r.code) {
    case 'not_found':
      return notFound(r.message);
    case 'exists':
      return new GatewayError(status.ALREADY_EXISTS, r.message);
    case 'too_large':
    case 'limit':
      return new GatewayError(status.RESOURCE_EXHAUSTED, r.message);
    case 'failed':
      return new GatewayError(status.INTERNAL, r.message);
    default:
      return invalid(r.message);
  }
}

/**
 * The run an in-sandbox request names (`E2b-Sandbox-Id`), once its access token
 * (`X-Access-Token`) proves the caller was handed it: READY, resumed first if it was paused.
 * Everything the E2B daemon's API does to one sandbox goes through here.
 */
export class SandboxRun {
  private constructor(
    readonly tenant: string,
    readonly run: ReadyRun,
  ) {}

  static async open(
    deps: { registry: RunRegistry; pauses: RunPauses; tokens: SandboxTokens },
    sandboxId: string | undefined,
    token: string | undefined,
  ): Promise<SandboxRun> {
    if (!sandboxId) throw invalid('missing the E2b-Sandbox-Id header');
    if (!deps.tokens.verify(sandboxId, token))
      throw new GatewayError(
        status.UNAUTHENTICATED,
        token ? 'invalid access token for this sandbox' : 'missing X-Access-Token',
      );
    const record = deps.registry.find(sandboxId);
    if (!record || record.state === 'STOPPED') throw notFound(`sandbox ${sandboxId} not found`);
    return new SandboxRun(record.tenant, await deps.pauses.whenReady(record.tenant, sandboxId));
  }

  get runId(): string {
    return this.run.runId;
  }

  get runner(): RunnerClient {
    return this.run.runner;
  }

  get workspacePath(): string {
    return this.run.sandbox.workspacePath;
  }

  path(p: string, what?: string): string {
    return toWorkspace(p, this.workspacePath, what);
  }

  /** An fs command whose refusal is thrown as a status. */
  async fs<P, T>(type: FamilyCommand<P, FsReply<T>>, payload: P): Promise<T> {
    const reply = await this.runner.command(type, payload);
    if (!reply.ok) throw fsError(reply);
    return reply;
  }

  stat(p: string): Promise<FsEntry> {
    return this.fs(FsStatCommand.type, { path: this.path(p) }).then((r) => r.entry);
  }

  list(p: string, depth: number): Promise<FsEntry[]> {
    return this.fs(FsListCommand.type, { path: this.path(p), depth }).then((r) => r.entries);
  }

  mkdir(p: string): Promise<{ entry: FsEntry; created: boolean }> {
    return this.fs(FsMakeDirCommand.type, { path: this.path(p) });
  }

  move(from: string, to: string): Promise<FsEntry> {
    return this.fs(FsMoveCommand.type, { from: this.path(from, 'source'), to: this.path(to, 'destination') }).then(
      (r) => r.entry,
    );
  }

  remove(p: string): Promise<void> {
    return this.fs(FsRemoveCommand.type, { path: this.path(p) }).then(() => undefined);
  }

  read(p: string, maxBytes: number): Promise<Buffer> {
    return this.fs(FsReadCommand.type, { path: this.path(p), maxBytes }).then((r) => Buffer.from(r.data, 'base64'));
  }

  /**
   * Watches a directory; `deliver` gets each batch until the returned stop is called or the
   * watch ends.
   */
  async watch(p: string, recursive: boolean, deliver: (e: FsWatchEventPayload) => void): Promise<() => Promise<void>> {
    const hub = watchHubOf(this.runner);
    const pending = hub.expect();
    let watchId: string;
    try {
      ({ watchId } = await this.fs(FsWatchCommand.type, { path: this.path(p), recursive }));
    } catch (err) {
      pending.cancel();
      throw err;
    }
    pending.claim(watchId, deliver);
    let stopped = false;
    return async () => {
      if (stopped) return;
      stopped = true;
      hub.drop(watchId);
      await this.runner.command(FsUnwatchCommand.type, { watchId }).catch(() => undefined);
    };
  }
}

/**
 * The fs watch events of one runner, routed by watch id. Events of a watch whose id is not yet
 * known (its start's reply is still on the way) are kept while a start is pending.
 */
class WatchHub {
  private readonly sinks = new Map<string, (e: FsWatchEventPayload) => void>();
  private pending = 0;
  private early: FsWatchEventPayload[] = [];

  constructor(runner: RunnerClient) {
    runner.onRunEvent(FsWatchEvent.type, (e) => {
      const sink = this.sinks.get(e.watchId);
      if (sink) {
        sink(e);
        if (e.ended) this.sinks.delete(e.watchId);
      } else if (this.pending > 0 && this.early.length < 1000) this.early.push(e);
    });
  }

  expect(): { claim(id: string, sink: (e: FsWatchEventPayload) => void): void; cancel(): void } {
    this.pending++;
    const done = () => {
      if (--this.pending === 0) this.early = [];
    };
    return {
      claim: (id, sink) => {
        const mine = this.early.filter((e) => e.watchId === id);
        this.early = this.early.filter((e) => e.watchId !== id);
        done();
        this.sinks.set(id, sink);
        for (const e of mine) sink(e);
      },
      cancel: done,
    };
  }

  drop(id: string): void {
    this.sinks.delete(id);
  }
}

const watchHubs = new WeakMap<RunnerClient, WatchHub>();

function watchHubOf(runner: RunnerClient): WatchHub {
  let hub = watchHubs.get(runner);
  if (!hub) watchHubs.set(runner, (hub = new WatchHub(runner)));
  return hub;
}
