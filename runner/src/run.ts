import type { ContentItem, InitializeParams, RunFeatures } from './protocol';
import type { ToolContext } from './tool';
import { Workspace } from './workspace';

/** Told after the file tools (or any tool) changed files, so it can add to the result. */
export interface WriteObserver {
  afterWrite(absPaths: string[], ctx: ToolContext): Promise<ContentItem[]>;
}

/** Everything of one run that lives in the runner: workspace, features, settings, observers. */
export class RunContext {
  readonly runId: string;
  readonly conversationId: string;
  readonly workspace: Workspace;
  readonly features: RunFeatures;
  private readonly settings: Record<string, unknown>;
  private readonly observers: WriteObserver[] = [];
  private readonly arrivals: ((absPath: string) => void)[] = [];
  private readonly stoppers: (() => Promise<void> | void)[] = [];
  private readonly commands = new Map<string, (command: string, payload: unknown) => Promise<unknown>>();
  /** Set by the runner's main: sends a run-level event up to the gateway. */
  emitEvent: (kind: string, payload: unknown) => void = () => undefined;

  constructor(init: InitializeParams) {
    this.runId = init.runId;
    this.conversationId = init.conversationId;
    this.workspace = new Workspace(init.workspace);
    this.features = init.features;
    this.settings = init.settings ?? {};
    // The gateway says when files arrived from outside the tools (PutFiles): payload { path }.
    this.handleCommands('workspace', async (command, payload) => {
      const rel = (payload as { path?: unknown } | null)?.path;
      if (command !== 'filesArrived' || typeof rel !== 'string') throw new Error('workspace commands: filesArrived { path }');
      this.filesArrived(await this.workspace.resolve(rel));
      return {};
    });
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

  /** Told when files arrived in the workspace other than through a tool (a directory or a file). */
  observeArrivals(fn: (absPath: string) => void): void {
    this.arrivals.push(fn);
  }

  filesArrived(absPath: string): void {
    for (const fn of this.arrivals) fn(absPath);
  }

  /** Lets a family take gateway → runner commands outside any tool call (see Methods.command). */
  handleCommands(family: string, handler: (command: string, payload: unknown) => Promise<unknown>): void {
    this.commands.set(family, handler);
  }

  async command(family: string, command: string, payload: unknown): Promise<unknown> {
    const handler = this.commands.get(family);
    if (!handler) throw new Error(`no command handler for ${family} in this run`);
    return handler(command, payload);
  }

  onStop(fn: () => Promise<void> | void): void {
    this.stoppers.push(fn);
  }

  async stop(): Promise<void> {
    await Promise.allSettled(this.stoppers.map((fn) => fn()));
  }
}
