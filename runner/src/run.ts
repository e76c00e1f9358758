import type {
  CommandParams,
  FamilyCommand,
  InitializeParams,
  RunEventParams,
  RunEventType,
  RunFeatures,
} from '../../protocol/src/run';
import type { ContentItem } from '../../protocol/src/tools';
import { ResourcesEvent } from '../../protocol/src/resources';
import { FilesArrivedCommand } from '../../protocol/src/workspace';
import { RestoreCommand, SuspendCommand } from '../../protocol/src/suspend';
import * as path from 'node:path';
import { DEFAULT_MAX_STATE_MB, PortableState } from './portable';
import { ResourceLedger } from './resources';
import { StartingProcesses } from './startups';
import type { ToolContext } from './tool';
import { Workspace } from './workspace';

/** Told after the file tools (or any tool) changed files, so it can add to the result. */
export interface WriteObserver {
  afterWrite(absPaths: string[], ctx: ToolContext): Promise<ContentItem[]>;
}

/** Everything of one run that lives in the runner: workspace, features, settings, observers. */
export class RunContext {
  runId: string;
  conversationId: string;
  readonly workspace: Workspace;
  readonly features: RunFeatures;
  private readonly settings: Record<string, unknown>;
  private readonly observers: WriteObserver[] = [];
  private readonly arrivals: ((absPath: string) => void)[] = [];
  private readonly stoppers: (() => Promise<void> | void)[] = [];
  /** Family command handlers, keyed by family, then command. */
  private readonly commands = new Map<string, Map<string, (payload: unknown) => Promise<unknown>>>();
  /** Set by the runner's main: sends a run-level event up to the gateway. */
  sendEvent: (event: RunEventParams) => void = () => undefined;
  /** Language servers and kernels alive, started and restarted, reported to the gateway as they change. */
  readonly resources = new ResourceLedger((payload) => this.emit(ResourcesEvent.type, payload));
  /** Processes starting now (language servers): background work (the ast index) holds off meanwhile. */
  readonly startups = new StartingProcesses();
  /** What of the run a pause keeps: each family registers its hooks (run/suspend, run/restore). */
  readonly portable: PortableState;

  constructor(init: InitializeParams) {
    this.runId = init.runId;
    this.conversationId = init.conversationId;
    this.workspace = new Workspace(init.workspace);
    this.features = init.features;
    this.settings = init.settings ?? {};
    // The gateway says when files arrived from outside the tools (PutFiles).
    this.handleCommand(FilesArrivedCommand.type, async ({ path: arrived }) => {
      if (typeof arrived !== 'string') throw new Error('filesArrived needs a path');
      this.filesArrived(await this.workspace.resolve(arrived));
      return {};
    });
    const { maxStateMB } = this.settingsFor('portable', { maxStateMB: DEFAULT_MAX_STATE_MB });
    this.portable = new PortableState(path.join(this.workspace.stateDir, 'state'), this, maxStateMB * 1024 * 1024);
    this.handleCommand(SuspendCommand.type, (params) => this.portable.suspend(params ?? {}));
    this.handleCommand(RestoreCommand.type, (params) => this.portable.restore(params ?? {}));
  }

  /** The run this context serves is now a fork of the one it served (a memory fork's copy of it). */
  becomeFork(runId: string, conversationId: string): void {
    this.runId = runId;
    this.conversationId = conversationId;
  }

  /** A family's settings from the server config, merged over its defaults. */
  settingsFor<T extends object>(family: string, defaults: T): T {
    const given = this.settings[family];
    return given && typeof given === 'object' ? { ...defaults, ...(given as Partial<T>) } : defaults;
  }

  observeWrites(observer: WriteObserver): void {
    this.observers.push(observer);
  }

  /** Lets observers (diagnostics, caches) react to written files; returns what they add. */
  async afterWrite(absPaths: string[], ctx: ToolContext): Promise<ContentItem[]> {
    const extra: ContentItem[] = [];
    for (const o of this.observers) extra.push(...(await o.afterWrite(absPaths, ctx)));
    return extra;
  }

  /** Sends a run-level event of a declared kind up to the gateway. */
  emit<P>(type: RunEventType<P>, payload: P): void {
    this.sendEvent({ kind: type.kind, payload });
  }

  /** Told when files arrived in the workspace other than through a tool (a directory or a file). */
  observeArrivals(fn: (absPath: string) => void): void {
    this.arrivals.push(fn);
  }

  filesArrived(absPath: string): void {
    for (const fn of this.arrivals) fn(absPath);
  }

  /** Lets a family take one gateway → runner command outside any tool call (CommandRequest). */
  handleCommand<P, R>(type: FamilyCommand<P, R>, handler: (payload: P) => Promise<R> | R): void {
    let family = this.commands.get(type.family);
    if (!family) this.commands.set(type.family, (family = new Map()));
    // The gateway built the payload from validated input for this very command.
    family.set(type.command, async (payload) => handler(payload as P));
  }

  async command({ family, command, payload }: CommandParams): Promise<unknown> {
    const handlers = this.commands.get(family);
    if (!handlers) throw new Error(`no command handler for ${family} in this run`);
    const handler = handlers.get(command);
    if (!handler) throw new Error(`unknown ${family} command ${command}`);
    return handler(payload);
  }

  onStop(fn: () => Promise<void> | void): void {
    this.stoppers.push(fn);
  }

  async stop(): Promise<void> {
    await Promise.allSettled(this.stoppers.map((fn) => fn()));
  }
}
