import type { ResourceCounts } from '../../../protocol/src/resources';
import type { ResourceLimits } from '../config';
import type { RunFeatures } from '../../../protocol/src/run';
import type { ToolDescriptor } from '../../../protocol/src/tools';
import type { PauseDepth, Sandbox } from '../sandbox/provider';
import { ArgumentValidator } from '../validation';
import type { RunnerClient } from './RunnerClient';

export type ApprovalPolicy = 'AUTO' | 'PROMPT' | 'DENY';

export interface RunSpec {
  conversationId: string;
  workspace: string;
  features: RunFeatures;
  approvals: { write: ApprovalPolicy; exec: ApprovalPolicy };
  labels: Record<string, string>;
  limits: ResourceLimits;
  /** The runner template; empty or absent for the base runner image. */
  template?: string;
  /** Hosts the run may reach through the egress proxy; absent for no network. */
  egress?: string[];
  /** The run it was forked from. */
  forkedFrom?: string;
}

/** A run's last pause, as GetRun reports it. */
export interface PauseInfo {
  depth: PauseDepth;
  pausedAt: Date;
  reason: string;
  stateBytes: number;
  notKept: string[];
  resumedAt?: Date;
  /**
   * A memory pause's checkpoint: the stopped sandbox that holds it and its name, empty while it
   * is being written (a checkpoint never seen written whole is never restored).
   */
  checkpoint?: { sandbox: string; name: string };
}

type ReadyPhase = {
  state: 'READY';
  sandbox: Sandbox;
  runner: RunnerClient;
  tools: ToolDescriptor[];
  validator: ArgumentValidator;
};

/**
 * Where a run is in its life, and what it holds there. A sandbox outlives a failure (its
 * workspace can still be read until DeleteRun); a runner connection lives only while the
 * run is starting, ready or pausing. A paused run holds only its workspace, by the provider's
 * handle.
 */
export type RunPhase =
  | { state: 'STARTING'; sandbox?: Sandbox; runner?: RunnerClient }
  | ReadyPhase
  /** `ready`: what the run goes back to if the pause cannot be made. */
  | { state: 'PAUSING'; sandbox: Sandbox; runner: RunnerClient; ready: ReadyPhase }
  | { state: 'PAUSED'; workspace: string }
  /** `provisional`: the connection noticed first; the sandbox's exit will say why. */
  | { state: 'FAILED'; reason: string; provisional: boolean; sandbox?: Sandbox }
  | { state: 'STOPPED'; reason: string; sandbox?: Sandbox };

export type RunState = RunPhase['state'];

/** Where a run's sandbox came from: claimed from the warm pool, started for it, or restored from its template's snapshot. */
export type RunStart = 'pool' | 'cold' | 'template';

/** One CreateRun's outcome, for metrics: how long it took and where its sandbox came from. */
export interface RunStarted {
  runId: string;
  tenant: string;
  start: RunStart;
  ms: number;
  ok: boolean;
  /**
   * For a claim, ms: taking a sandbox; then, side by side from there, writing its claim record
   * and `bind` (to the run READY).
   */
  steps?: ClaimSteps;
}

export interface ClaimSteps {
  take: number;
  record: number;
  bind: number;
}

/** A run that can take a tool call now: what a call needs, without optional fields. */
export interface ReadyRun {
  readonly runId: string;
  readonly tenant: string;
  readonly spec: RunSpec;
  readonly sandbox: Sandbox;
  readonly runner: RunnerClient;
  readonly tools: ToolDescriptor[];
  readonly validator: ArgumentValidator;
  tool(name: string): ToolDescriptor | undefined;
  /** Once after a resume: what the pause did not keep, for the first result to say. */
  takeResumeNotice(): string | undefined;
}

/**
 * One run as the gateway knows it. Everything that matters survives in the sandbox's
 * labels. Its phase changes only through the transitions below, each legal from named
 * states only.
 */
export class RunRecord {
  private current: RunPhase = { state: 'STARTING' };
  /** The language servers and kernels the runner last reported (counts since the run began). */
  resources?: ResourceCounts[];
  /** The last pause, kept after a resume for GetRun. */
  pause?: PauseInfo;
  /** What the first tool result after a resume says about what the pause did not keep. */
  private resumeNotice?: string;
  /** How its start came about, where that is worth saying (GetRun's `start_note`). */
  startNote?: string;

  constructor(
    readonly runId: string,
    readonly tenant: string,
    readonly spec: RunSpec,
    readonly createdAt: Date,
    start: RunStart = 'cold',
  ) {
    this.origin = start;
  }

  private origin: RunStart;

  /** Where its sandbox came from. */
  get start(): RunStart {
    return this.origin;
  }

  /** Registered before its claim in a shared pool (an API call) succeeded: its sandbox is a pooled one. */
  claimedFromPool(): void {
    this.origin = 'pool';
  }

  get state(): RunState {
    return this.current.state;
  }

  /** Why the run failed or stopped; empty while it lives and after a plain delete. */
  get error(): string {
    return this.current.state === 'FAILED' || this.current.state === 'STOPPED' ? this.current.reason : '';
  }

  get sandbox(): Sandbox | undefined {
    return 'sandbox' in this.current ? this.current.sandbox : undefined;
  }

  get runner(): RunnerClient | undefined {
    return 'runner' in this.current ? this.current.runner : undefined;
  }

  /** It holds a sandbox's memory and CPU: starting, ready or pausing. */
  get live(): boolean {
    return this.current.state === 'STARTING' || this.current.state === 'READY' || this.current.state === 'PAUSING';
  }

  /** The provider's handle on a paused run's workspace. */
  get pausedWorkspace(): string | undefined {
    return this.current.state === 'PAUSED' ? this.current.workspace : undefined;
  }

  /** READY → PAUSING: calls already running are the caller's to have checked; new ones wait. */
  beginPause(): { sandbox: Sandbox; runner: RunnerClient } {
    const c = this.current;
    if (c.state !== 'READY') throw new Error(`run ${this.runId}: pause while ${c.state}`);
    this.current = { state: 'PAUSING', sandbox: c.sandbox, runner: c.runner, ready: c };
    return c;
  }

  /** PAUSING → READY: the pause could not be made and the sandbox is as it was. */
  pauseAbandoned(): boolean {
    const c = this.current;
    if (c.state !== 'PAUSING') return false;
    this.current = c.ready;
    return true;
  }

  /**
   * PAUSING → STARTING: a memory checkpoint that failed left the sandbox running with its runner
   * quiesced; a new connection to it is on its way (`attach`, then `becomeReady`).
   */
  reconnecting(): void {
    const c = this.current;
    if (c.state !== 'PAUSING') throw new Error(`run ${this.runId}: reconnect while ${c.state}`);
    this.current = { state: 'STARTING' };
  }

  /** PAUSING (or, found again after a restart, STARTING) → PAUSED: the sandbox is gone, the workspace kept. */
  paused(workspace: string, info: PauseInfo): boolean {
    const c = this.current;
    if (c.state !== 'PAUSING' && c.state !== 'STARTING') return false;
    this.current = { state: 'PAUSED', workspace };
    this.pause = info;
    return true;
  }

  /** PAUSED → STARTING: a new sandbox on the kept workspace is on its way. */
  beginResume(): string {
    const c = this.current;
    if (c.state !== 'PAUSED') throw new Error(`run ${this.runId}: resume while ${c.state}`);
    this.current = { state: 'STARTING' };
    return c.workspace;
  }

  /** STARTING|FAILED → PAUSED: a resume did not come through; the kept workspace is still there. */
  backToPaused(workspace: string): void {
    const c = this.current;
    if (c.state !== 'STARTING' && c.state !== 'FAILED')
      throw new Error(`run ${this.runId}: back to paused while ${c.state}`);
    this.current = { state: 'PAUSED', workspace };
  }

  /** After a resume made the run READY: the notice is for the first result after it. */
  markResumed(notice: string): void {
    if (this.pause) this.pause.resumedAt = new Date();
    this.resumeNotice = notice || undefined;
  }

  /** The resume's notice, once: the first result after a resume carries it, no later one. */
  takeResumeNotice(): string | undefined {
    const notice = this.resumeNotice;
    this.resumeNotice = undefined;
    return notice;
  }

  /** STARTING: the sandbox exists and its runner is being talked to. */
  attach(sandbox: Sandbox, runner: RunnerClient): void {
    if (this.current.state !== 'STARTING') throw new Error(`run ${this.runId}: attach while ${this.current.state}`);
    this.current = { state: 'STARTING', sandbox, runner };
  }

  /** STARTING → READY once the runner has answered `initialize`; false if it failed meanwhile. */
  becomeReady(tools: ToolDescriptor[]): boolean {
    const c = this.current;
    if (c.state !== 'STARTING') return false;
    if (!c.sandbox || !c.runner) throw new Error(`run ${this.runId}: ready without a sandbox`);
    this.current = {
      state: 'READY',
      sandbox: c.sandbox,
      runner: c.runner,
      tools,
      validator: new ArgumentValidator(tools),
    };
    return true;
  }

  /**
   * STARTING|READY|PAUSING → FAILED. Returns the runner to let go of, or undefined when the run had
   * already ended (the first reason stands).
   */
  fail(reason: string, provisional = false): { runner?: RunnerClient } | undefined {
    const c = this.current;
    if (c.state !== 'STARTING' && c.state !== 'READY' && c.state !== 'PAUSING') return undefined;
    this.current = { state: 'FAILED', reason, provisional, sandbox: c.sandbox };
    return { runner: c.runner };
  }

  /**
   * The sandbox ended: a provisional failure takes the exit's reason (OOM, signal); a live
   * run fails with it. Returns what `fail` returns, or undefined when nothing changed state.
   */
  sandboxExited(reason: string): { runner?: RunnerClient } | undefined {
    const c = this.current;
    if (c.state === 'FAILED' && c.provisional) {
      this.current = { ...c, reason, provisional: false };
      return undefined;
    }
    return this.fail(reason);
  }

  /** FAILED|STOPPED: the sandbox (and its workspace) was removed; it holds no disk any more. */
  sandboxRemoved(): void {
    const c = this.current;
    if (c.state === 'FAILED' || c.state === 'STOPPED') this.current = { ...c, sandbox: undefined };
  }

  /**
   * Any state → STOPPED. A failure's reason is kept; otherwise `why`. Returns the phase it
   * left, so the caller can shut down what that phase held.
   */
  stop(why: string): RunPhase {
    const before = this.current;
    const reason = before.state === 'FAILED' || before.state === 'STOPPED' ? before.reason || why : why;
    this.current = { state: 'STOPPED', reason, sandbox: this.sandbox };
    return before;
  }

  /** The run as a call sees it, or undefined unless READY. */
  ready(): ReadyRun | undefined {
    const c = this.current;
    if (c.state !== 'READY') return undefined;
    const { runId, tenant, spec } = this;
    return {
      runId,
      tenant,
      spec,
      sandbox: c.sandbox,
      runner: c.runner,
      tools: c.tools,
      validator: c.validator,
      tool: (name) => c.tools.find((t) => t.name === name),
      takeResumeNotice: () => this.takeResumeNotice(),
    };
  }
}
