import { randomUUID } from 'node:crypto';
import { status } from '@grpc/grpc-js';
import { RestoreCommand, type RestoreResult, SuspendCommand } from '../../../protocol/src/suspend';
import type { GatewayConfig } from '../config';
import type { EgressService } from '../egress/service';
import { GatewayError } from '../errors';
import { logger } from '../log';
import type { ClaimStore } from '../pool/ClaimStore';
import { type Sandbox, SandboxExistsError, type SandboxProvider, type SandboxSpec } from '../sandbox/provider';
import type { TemplateCatalog } from '../templates/catalog';
import type { Telemetry } from '../observability/Telemetry';
import type { Tenancy } from '../tenancy/Tenancy';
import { PausedStore } from './PausedStore';
import type { RunLifecycle } from './RunLifecycle';
import { type PauseInfo, type ReadyRun, RunRecord } from './RunRecord';
import type { RunRegistry } from './RunRegistry';

export interface RunPausesDeps {
  config: GatewayConfig;
  provider: SandboxProvider;
  registry: RunRegistry;
  lifecycle: Pick<RunLifecycle, 'connect' | 'letGo' | 'holdOn' | 'labelsFor' | 'stop'>;
  tenancy: Pick<Tenancy, 'checkQuota' | 'admit'>;
  templates: Pick<TemplateCatalog, 'imageFor'>;
  egress: Pick<EgressService, 'open' | 'close'>;
  claims: ClaimStore;
  paused: PausedStore;
  telemetry: Pick<Telemetry, 'runMoved'>;
}

/**
 * Pausing a run and bringing it back. A portable pause has the runner write what of the run is
 * data into its workspace, records the decision, and removes the sandbox keeping the workspace;
 * a resume makes a sandbox on that workspace and has the new runner read it back. A call for a
 * paused run resumes it on its own (`whenReady`): the caller only waits.
 */
export class RunPauses {
  /** The pause or resume under way, per run: a second request joins it. */
  private readonly moving = new Map<string, Promise<unknown>>();
  private sweeper?: NodeJS.Timeout;

  constructor(private readonly deps: RunPausesDeps) {}

  /** Where the provider can pause this run, and why not otherwise. */
  private pausable(run: RunRecord): string | undefined {
    const { pauseDepths, noPauseReason } = this.deps.provider.capabilities;
    if (!pauseDepths?.includes('portable'))
      return noPauseReason ?? `the ${this.deps.provider.name} provider cannot pause runs`;
    if (run.spec.workspace) return 'a run on a host workspace is not paused (its files are the host directory)';
    return undefined;
  }

  async pause(tenant: string, runId: string, reason = 'requested'): Promise<RunRecord> {
    const run = this.deps.registry.get(tenant, runId);
    await this.settled(runId);
    if (this.moving.has(runId)) return this.pause(tenant, runId, reason);
    if (run.state === 'PAUSED') return run;
    const ready = this.deps.registry.ready(tenant, runId);
    const refused = this.pausable(run);
    if (refused) throw new GatewayError(status.FAILED_PRECONDITION, `run ${runId} cannot be paused: ${refused}`);
    if (ready.runner.toolCallsInFlight > 0)
      throw new GatewayError(status.FAILED_PRECONDITION, `run ${runId} cannot be paused while a call is in flight`);
    const { maxPausedPerTenant } = this.deps.config.runs;
    if (this.deps.registry.list(tenant).filter((r) => r.state === 'PAUSED').length >= maxPausedPerTenant)
      throw new GatewayError(
        status.RESOURCE_EXHAUSTED,
        `tenant ${tenant} has ${maxPausedPerTenant} paused runs, its limit: delete or resume one first`,
      );
    await this.reported(run, 'pause', () => this.moveOnce(runId, () => this.pauseAtDepth(run, ready, reason)));
    return run;
  }

  /**
   * At memory depth where the provider can and the run's runner is reached through its socket
   * (the gateway reconnects to it after the restore); a memory checkpoint that fails falls back
   * to portable, and `Run.pause` says which depth was used and why.
   */
  private async pauseAtDepth(run: RunRecord, ready: ReadyRun, reason: string): Promise<void> {
    if (this.memoryRefusal(ready)) return this.portablePause(run, ready, reason);
    const refused = this.deps.provider.memory!.refusal?.(ready.sandbox.id);
    if (refused)
      return this.portablePause(run, ready, reason, `no memory checkpoint (${refused}): paused at portable depth`);
    const fellBack = await this.memoryPause(run, reason);
    if (fellBack === undefined) return;
    const again = this.deps.registry.ready(run.tenant, run.runId);
    await this.portablePause(run, again, reason, `a memory checkpoint failed (${fellBack}): paused at portable depth`);
  }

  /** Why this run is not paused at memory depth, or undefined when it can be. */
  private memoryRefusal(ready: ReadyRun): string | undefined {
    const { provider, config } = this.deps;
    if (!config.runs.memoryPause) return 'runs.memoryPause is off';
    if (!provider.memory || !provider.capabilities.pauseDepths?.includes('memory'))
      return 'the provider takes no memory checkpoints';
    if (!ready.sandbox.socket || ready.sandbox.dial)
      return "the runner is not reached through a socket of the provider's";
    if (!ready.sandbox.keepable) return 'its sandbox has no workspace of its own to keep';
    return undefined;
  }

  /**
   * A memory pause: a record saying a checkpoint is being written (so a restart never restores
   * it), the runner quiesced, the checkpoint (the sandbox stops: no process, no memory), then the
   * record naming the checkpoint. Returns why it fell back when the checkpoint failed: the runner
   * is woken and the run READY again, for a portable pause.
   */
  private async memoryPause(run: RunRecord, reason: string): Promise<string | undefined> {
    const { paused, lifecycle, claims, egress } = this.deps;
    const memory = this.deps.provider.memory!;
    const t0 = performance.now();
    const { sandbox, runner } = run.beginPause();
    const workspace = sandbox.keepable!;
    const info: PauseInfo = {
      depth: 'memory',
      pausedAt: new Date(),
      reason,
      stateBytes: 0,
      notKept: [],
      checkpoint: { sandbox: sandbox.id, name: '' },
    };
    try {
      await paused.write(run.runId, PausedStore.recordOf(run, workspace, info), { durable: true });
      // From here the sandbox's end (the checkpoint stops it) and the runner's drop are on purpose.
      lifecycle.letGo(sandbox);
      await runner.quiesce(5000);
    } catch (err) {
      await paused.remove(run.runId).catch(() => undefined);
      lifecycle.holdOn(sandbox);
      run.pauseAbandoned();
      throw new GatewayError(
        status.FAILED_PRECONDITION,
        `run ${run.runId} could not be paused: ${(err as Error).message}`,
      );
    }
    runner.dispose();
    let name: string;
    try {
      name = await this.whenQuiet(() => memory.checkpoint(sandbox.id));
    } catch (err) {
      const why = (err as Error).message;
      logger.warn({ runId: run.runId, err: why }, 'memory checkpoint failed; pausing at portable depth');
      await paused.remove(run.runId).catch(() => undefined);
      run.reconnecting();
      try {
        await lifecycle.connect(run, await memory.wake(sandbox.id), undefined, true);
      } catch (e) {
        // The sandbox did not outlive the failed checkpoint (runsc may end it): what it held in
        // memory is lost, its files are not. Paused at portable depth with nothing saved, saying so.
        return this.pausedAfterLoss(run, sandbox.id, reason, why, (e as Error).message);
      }
      return why;
    }
    info.checkpoint = { sandbox: sandbox.id, name };
    info.stateBytes = (await memory.sizeOf?.(sandbox.id, name).catch(() => undefined)) ?? 0;
    // The checkpoint is written whole: from now on it is what a resume restores.
    await paused.write(run.runId, PausedStore.recordOf(run, workspace, info), { durable: true });
    run.paused(workspace, info);
    if (run.start === 'pool') await claims.remove(sandbox.id).catch(() => undefined);
    await egress.close(run.runId);
    logger.info({ runId: run.runId, reason, depth: 'memory', ms: Math.round(performance.now() - t0) }, 'run paused');
    return undefined;
  }

  private async pausedAfterLoss(
    run: RunRecord,
    sandboxId: string,
    reason: string,
    why: string,
    gone: string,
  ): Promise<undefined> {
    const { provider, paused, egress, lifecycle } = this.deps;
    // The wake attached a sandbox before its runner failed: its end is the pause's.
    if (run.sandbox) lifecycle.letGo(run.sandbox);
    run.runner?.dispose();
    const workspace = await provider.park!(sandboxId).catch(() => undefined);
    if (!workspace) {
      run.fail(`the run could not be paused: its memory checkpoint failed (${why}) and its sandbox is gone`);
      throw new GatewayError(status.UNAVAILABLE, `run ${run.runId} could not be paused: ${why}`);
    }
    const info: PauseInfo = {
      depth: 'portable',
      pausedAt: new Date(),
      reason,
      stateBytes: 0,
      notKept: [
        `the run's memory (kernels' variables, language servers, workers): a memory checkpoint failed (${why}) and the sandbox ended with it (${gone}); the files of the workspace are kept`,
      ],
    };
    await paused.write(run.runId, PausedStore.recordOf(run, workspace, info), { durable: true });
    run.paused(workspace, info);
    await egress.close(run.runId);
    logger.warn({ runId: run.runId, why, gone }, 'memory checkpoint failed and the sandbox ended: paused on its files');
    return undefined;
  }

  /**
   * A checkpoint, once the runner's socket connections are closed: gVisor refuses to save a
   * sandbox that still holds one, and the runner closes them just after it answers.
   */
  private async whenQuiet(take: () => Promise<string>): Promise<string> {
    let last: Error | undefined;
    for (let i = 0; i < 4; i++) {
      try {
        return await take();
      } catch (err) {
        last = err as Error;
        if (!/unix|socket|connected/i.test(last.message)) throw last;
        await new Promise((r) => setTimeout(r, 50 * 2 ** i));
      }
    }
    throw last!;
  }

  /** Times a pause or a resume and reports how it ended: metrics and the audit log. */
  private async reported(run: RunRecord, move: 'pause' | 'resume', go: () => Promise<void>): Promise<void> {
    const t0 = performance.now();
    const report = (ok: boolean, detail: string) =>
      this.deps.telemetry.runMoved(run, move, {
        // The depth used: a pause's own, a resume's of the pause it ends (after a fallback, portable).
        depth: run.pause?.depth ?? 'portable',
        ok,
        ms: performance.now() - t0,
        detail,
        ...(move === 'pause' && ok ? { stateBytes: run.pause?.stateBytes ?? 0 } : {}),
      });
    try {
      await go();
    } catch (err) {
      report(false, (err as Error).message);
      throw err;
    }
    const p = run.pause;
    report(
      true,
      move === 'pause' ? `${p?.reason}${p?.notKept.length ? `; not kept: ${p.notKept.join('; ')}` : ''}` : 'resumed',
    );
  }

  private async portablePause(run: RunRecord, ready: ReadyRun, reason: string, fellBack?: string): Promise<void> {
    const { provider, paused, claims, egress, lifecycle } = this.deps;
    const t0 = performance.now();
    const { sandbox, runner } = run.beginPause();
    let info: PauseInfo;
    try {
      const wrote = await runner.command(SuspendCommand.type, { reason });
      if (!wrote.written) throw new Error(wrote.notKept.map((n) => `${n.what}: ${n.why}`).join('; '));
      if (!sandbox.keepable) throw new Error('its sandbox has no workspace of its own to keep');
      info = {
        depth: 'portable',
        pausedAt: new Date(),
        reason,
        stateBytes: wrote.bytes,
        notKept: [...(fellBack ? [fellBack] : []), ...wrote.notKept.map((n) => `${n.what}: ${n.why}`)],
      };
      // The decision, before the sandbox goes: a restart that finds it completes the pause.
      await paused.write(run.runId, PausedStore.recordOf(run, sandbox.keepable, info), { durable: true });
    } catch (err) {
      run.pauseAbandoned();
      throw new GatewayError(
        status.FAILED_PRECONDITION,
        `run ${run.runId} could not be paused: ${(err as Error).message}`,
      );
    }
    lifecycle.letGo(sandbox);
    await runner.shutdown(1500).catch(() => undefined);
    runner.dispose();
    try {
      const workspace = await provider.park!(sandbox.id);
      run.paused(workspace, info);
    } catch (err) {
      // The sandbox may be half-removed: the run is over, and DeleteRun removes what is left.
      await paused.remove(run.runId).catch(() => undefined);
      run.fail(`the run could not be paused: ${(err as Error).message}`);
      throw new GatewayError(status.UNAVAILABLE, `run ${run.runId} could not be paused: ${(err as Error).message}`);
    }
    if (run.start === 'pool') await claims.remove(sandbox.id).catch(() => undefined);
    await egress.close(run.runId);
    logger.info(
      {
        runId: run.runId,
        reason,
        bytes: info.stateBytes,
        ms: Math.round(performance.now() - t0),
        tools: ready.tools.length,
      },
      'run paused',
    );
  }

  async resume(tenant: string, runId: string): Promise<RunRecord> {
    const run = this.deps.registry.get(tenant, runId);
    await this.settled(runId);
    if (this.moving.has(runId)) return this.resume(tenant, runId);
    if (run.state !== 'PAUSED') return run;
    // Coming back takes memory and CPU again: the tenant's live quota decides, before anything starts.
    const { tenancy, registry } = this.deps;
    tenancy.checkQuota(tenant, registry.reservedBy(tenant), run.spec.limits);
    await this.reported(run, 'resume', () =>
      this.moveOnce(runId, () =>
        tenancy.admit(tenant, () => (run.pause?.checkpoint?.name ? this.memoryResume(run) : this.portableResume(run))),
      ),
    );
    return run;
  }

  /**
   * Starts the paused sandbox from its checkpoint and reconnects to its runner: everything it
   * held is there as it was. A restore that fails falls back to the run's files: the sandbox and
   * its checkpoint are removed keeping the workspace, and the run resumes at portable depth with
   * a notice saying its memory was not kept.
   */
  private async memoryResume(run: RunRecord): Promise<void> {
    const { provider, paused, lifecycle, egress } = this.deps;
    const memory = provider.memory!;
    const t0 = performance.now();
    const checkpoint = run.pause!.checkpoint!;
    const workspace = run.beginResume();
    try {
      if (run.spec.egress) await egress.open(run.runId, run.tenant, run.spec.egress);
      const sandbox = await memory.restore(checkpoint.sandbox, checkpoint.name);
      await lifecycle.connect(run, sandbox, undefined, true);
      if (run.state !== 'READY') throw new Error(run.error || `the run is ${run.state.toLowerCase()}`);
    } catch (err) {
      const why = (err as Error).message;
      logger.warn({ runId: run.runId, err: why }, 'memory restore failed; resuming from the workspace');
      if (run.sandbox) lifecycle.letGo(run.sandbox);
      run.runner?.dispose();
      await egress.close(run.runId);
      const kept = await provider.park!(checkpoint.sandbox).catch(() => workspace);
      const info: PauseInfo = {
        ...run.pause!,
        depth: 'portable',
        checkpoint: undefined,
        notKept: [
          `the run's memory (kernels' variables, language servers, workers): its checkpoint could not be restored (${why}); the files of the workspace are kept`,
        ],
      };
      await paused.write(run.runId, PausedStore.recordOf(run, kept, info), { durable: true });
      run.backToPaused(kept);
      run.pause = info;
      return this.portableResume(run, info.notKept[0]);
    }
    run.markResumed(
      `This run was paused at memory depth at ${run.pause!.pausedAt.toISOString()} and resumed as it was: kernels, language servers and staged edits are all kept.`,
    );
    await paused.remove(run.runId);
    await memory
      .drop(checkpoint.sandbox, checkpoint.name)
      .catch((err: Error) =>
        logger.warn({ runId: run.runId, err: err.message }, 'could not remove a restored checkpoint'),
      );
    logger.info({ runId: run.runId, depth: 'memory', ms: Math.round(performance.now() - t0) }, 'run resumed');
  }

  private async portableResume(run: RunRecord, lost?: string): Promise<void> {
    const { provider, paused, egress, lifecycle, templates } = this.deps;
    const t0 = performance.now();
    const workspace = run.beginResume();
    let restored: RestoreResult | undefined;
    let made: string | undefined;
    try {
      const grant = run.spec.egress ? await egress.open(run.runId, run.tenant, run.spec.egress) : undefined;
      const sandbox = await provider.create({
        runId: run.runId,
        tenant: run.tenant,
        limits: run.spec.limits,
        labels: lifecycle.labelsFor(run),
        image: await templates.imageFor(run.tenant, run.spec.template ?? ''),
        egress: grant,
        keptWorkspace: workspace,
      });
      made = sandbox.id;
      await lifecycle.connect(
        run,
        sandbox,
        async (runner) => {
          // A fork's first restore takes its parent's state; its own later ones, its own.
          restored = await runner.command(RestoreCommand.type, { keep: true, forkOf: run.spec.forkedFrom });
        },
        true,
      );
      if (run.state !== 'READY') throw new Error(run.error || `the run is ${run.state.toLowerCase()}`);
    } catch (err) {
      // Nothing is lost: the workspace and its state stay for the next try.
      const why = (err as Error).message;
      if (run.sandbox) lifecycle.letGo(run.sandbox);
      run.runner?.dispose();
      if (made) await provider.park!(made).catch(() => undefined);
      await egress.close(run.runId);
      run.backToPaused(workspace);
      if (err instanceof SandboxExistsError && (await this.resumedElsewhere(run))) return;
      throw new GatewayError(status.UNAVAILABLE, `run ${run.runId} could not be resumed (it stays paused): ${why}`);
    }
    const notice = noticeOf(restored);
    run.markResumed(lost ? `This run's memory could not be restored: ${lost}. ${notice}` : notice);
    await paused.remove(run.runId);
    logger.info(
      { runId: run.runId, outcome: restored?.outcome, ms: Math.round(performance.now() - t0) },
      'run resumed',
    );
  }

  /**
   * Whether another replica's resume of the run, under way when this one's found its sandbox
   * made, brought it back: its new sandbox is taken up here by the watch (a new record for the
   * run, READY). Waits up to the start timeout.
   */
  private async resumedElsewhere(run: RunRecord): Promise<boolean> {
    const { registry, config } = this.deps;
    const deadline = Date.now() + config.runs.startTimeoutSeconds * 1000;
    while (Date.now() < deadline) {
      const now = registry.find(run.runId);
      if (!now) return false;
      if (now !== run && now.state === 'READY') return true;
      if (now !== run && now.state !== 'STARTING') return false;
      await new Promise((r) => setTimeout(r, 100));
    }
    return false;
  }

  /**
   * `count` new runs of the tenant's from the run's state now: the runner writes its state
   * (the run goes on), then each fork gets a copy of the workspace and restores it. Checked
   * whole against the quotas before anything is made; a fork that fails to start is FAILED
   * with its reason, the others go on.
   */
  async fork(tenant: string, runId: string, count: number): Promise<RunRecord[]> {
    const { config, registry } = this.deps;
    const parent = registry.get(tenant, runId);
    const n = count || 1;
    if (!Number.isInteger(n) || n < 1 || n > config.runs.maxForks)
      throw new GatewayError(
        status.INVALID_ARGUMENT,
        `count must be 1 to ${config.runs.maxForks} (runs.maxForks), not ${count}`,
      );
    const forks = Array.from(
      { length: n },
      () =>
        new RunRecord(
          `run-${randomUUID()}`,
          tenant,
          { ...parent.spec, labels: { ...parent.spec.labels }, forkedFrom: runId },
          new Date(),
          'cold',
        ),
    );
    await this.forkInto(
      parent,
      forks,
      `This run is a fork of run ${parent.runId}, copied at memory depth: its kernels' variables, language servers and staged edits are those of ${parent.runId} when it was forked; nothing either writes from now on is seen by the other.`,
    );
    return forks;
  }

  /**
   * Starts `forks` (new records of one tenant, each with `spec.forkedFrom` the parent, not yet
   * registered) from the parent's state: what ForkRun does, and how a run starts from its
   * template's snapshot (whose run belongs to the gateway). `memoryNotice` is what a fork
   * copied at memory depth says in its first result. Refusals and quotas are checked before
   * anything is registered or made.
   */
  async forkInto(
    parent: RunRecord,
    forks: RunRecord[],
    memoryNotice: string,
    opts: { keepPaused?: boolean } = {},
  ): Promise<void> {
    const { registry, tenancy, provider } = this.deps;
    const runId = parent.runId;
    const tenant = forks[0]?.tenant ?? parent.tenant;
    const refused =
      this.pausable(parent) ??
      (provider.newWorkspaces && provider.copyWorkspace
        ? undefined
        : `the ${provider.name} provider cannot copy a workspace`);
    if (refused) throw new GatewayError(status.FAILED_PRECONDITION, `run ${runId} cannot be forked: ${refused}`);
    await this.settled(runId);
    if (this.moving.has(runId)) return this.forkInto(parent, forks, memoryNotice, opts);
    // A parent paused at memory depth is resumed, and its forks start from the state it writes
    // then; with `keepPaused` its checkpoint is copied as it is (and stays), where it can be.
    const checkpointed = parent.state === 'PAUSED' && parent.pause?.checkpoint?.name;
    if (checkpointed && !(opts.keepPaused && this.keptCheckpointFits(parent, forks))) {
      await this.resume(parent.tenant, runId);
      return this.forkInto(parent, forks, memoryNotice, opts);
    }
    if (parent.state !== 'PAUSED') registry.ready(parent.tenant, runId);
    // All or nothing: every fork is a live run with its limits.
    let inUse = registry.reservedBy(tenant);
    for (const f of forks) {
      const l = f.spec.limits;
      tenancy.checkQuota(tenant, inUse, l);
      inUse = {
        liveRuns: inUse.liveRuns + 1,
        memoryMb: inUse.memoryMb + l.memoryMb,
        cpuMillis: inUse.cpuMillis + l.cpuMillis,
        diskMb: inUse.diskMb + (l.diskMb ?? 0),
      };
    }
    for (const f of forks) registry.add(f);
    // The parent stays as it is meanwhile: no pause or resume of it starts until the copies are made.
    await this.moveOnce(runId, async () => {
      if (checkpointed) return this.keptMemoryFork(parent, forks, memoryNotice);
      if (await this.memoryFork(parent, forks, memoryNotice)) return;
      const source = await this.stateOf(parent);
      const specs = await Promise.all(forks.map((f) => this.forkSpec(f)));
      const copies = await provider.newWorkspaces!(specs);
      await provider.copyWorkspace!(source, copies, specs[0]?.image).catch(async (err) => {
        for (const copy of copies) await provider.dropWorkspace?.(copy).catch(() => undefined);
        throw err;
      });
      await Promise.all(forks.map((f, i) => tenancy.admit(tenant, () => this.startFork(f, copies[i]))));
    }).catch((err) => {
      for (const f of forks)
        if (f.state === 'STARTING') f.fail(`the fork could not be made: ${(err as Error).message}`);
      throw err;
    });
  }

  /** The workspace to copy, with the run's state written into it now. */
  private async stateOf(run: RunRecord): Promise<string> {
    const kept = run.pausedWorkspace;
    if (kept) return kept;
    const ready = run.ready();
    if (!ready?.sandbox.keepable)
      throw new GatewayError(status.FAILED_PRECONDITION, `run ${run.runId} is ${run.state.toLowerCase()}`);
    const wrote = await ready.runner.command(SuspendCommand.type, { reason: 'fork' });
    if (!wrote.written)
      throw new GatewayError(
        status.FAILED_PRECONDITION,
        `run ${run.runId} could not write its state: ${wrote.notKept.map((k) => `${k.what}: ${k.why}`).join('; ')}`,
      );
    return ready.sandbox.keepable;
  }

  private async forkSpec(fork: RunRecord): Promise<SandboxSpec> {
    const { lifecycle, templates } = this.deps;
    return {
      runId: fork.runId,
      tenant: fork.tenant,
      limits: fork.spec.limits,
      labels: lifecycle.labelsFor(fork),
      image: await templates.imageFor(fork.tenant, fork.spec.template ?? ''),
    };
  }

  /**
   * A fork begins as a paused run on its copy of the workspace (recorded like any pause, so a
   * restart finds it and the next call resumes it) and is resumed at once.
   */
  private async startFork(fork: RunRecord, copy: string): Promise<void> {
    const { provider, paused } = this.deps;
    try {
      const info: PauseInfo = { depth: 'portable', pausedAt: new Date(), reason: 'fork', stateBytes: 0, notKept: [] };
      await paused.write(fork.runId, PausedStore.recordOf(fork, copy, info), { durable: true });
      fork.paused(copy, info);
    } catch (err) {
      await provider.dropWorkspace?.(copy).catch(() => undefined);
      fork.fail(`the fork could not be made: ${(err as Error).message}`);
      return;
    }
    // A fork that cannot start now stays paused on its copy: the next call tries again.
    await this.reported(fork, 'resume', () => this.moveOnce(fork.runId, () => this.portableResume(fork))).catch(
      (err: Error) => logger.warn({ runId: fork.runId, err: err.message }, 'fork left paused'),
    );
  }

  /**
   * Forks at memory depth, where the run could be paused at it: a checkpoint of the running
   * sandbox and a workspace copy per fork (`copiesOf`), then each fork a sandbox started from
   * that checkpoint on its copy, its runner told which run it serves now. False, with nothing
   * made and the parent READY again, where this cannot be done (the caller forks at portable
   * depth). A fork that fails alone is FAILED with its reason.
   */
  private async memoryFork(parent: RunRecord, forks: RunRecord[], notice: string): Promise<boolean> {
    const { provider } = this.deps;
    const memory = provider.memory;
    const ready = parent.ready();
    if (!ready || !memory?.snapshot || !memory.copies || parent.spec.egress) return false;
    if (!sameSandbox(parent, forks)) return false;
    if (this.memoryRefusal(ready) || memory.refusal?.(ready.sandbox.id)) return false;
    // The checkpoint closes the runner's connections: a call under way would be cut.
    if (ready.runner.toolCallsInFlight > 0) return false;
    const t0 = performance.now();
    const specs = await Promise.all(forks.map((f) => this.forkSpec(f)));
    const copied = await this.copiesOf(parent, specs);
    if (!copied) return false;
    const { workspaces, started } = copied;
    await this.connectForks(forks, workspaces, started, notice);
    logger.info(
      { runId: parent.runId, forks: forks.length, depth: 'memory', ms: Math.round(performance.now() - t0) },
      'run forked',
    );
    return true;
  }

  /** Whether forks can be copies of the parent's kept checkpoint (which is not resumed for them). */
  private keptCheckpointFits(parent: RunRecord, forks: RunRecord[]): boolean {
    const memory = this.deps.provider.memory;
    return !!memory?.copies && !!parent.pausedWorkspace && sameSandbox(parent, forks);
  }

  /**
   * Forks of a parent paused at memory depth, its checkpoint left as it is: each fork's
   * workspace a copy of the parent's kept one, each sandbox started from a copy of the
   * checkpoint. The parent stays paused, ready for the next forks.
   */
  private async keptMemoryFork(parent: RunRecord, forks: RunRecord[], notice: string): Promise<void> {
    const { provider, tenancy } = this.deps;
    const memory = provider.memory!;
    const checkpoint = parent.pause!.checkpoint!;
    const t0 = performance.now();
    const specs = await Promise.all(forks.map((f) => this.forkSpec(f)));
    const workspaces = await provider.newWorkspaces!(specs);
    const copied = provider.copyWorkspace!(parent.pausedWorkspace!, workspaces, specs[0]?.image);
    copied.catch(() => undefined);
    let started: PromiseSettledResult<Sandbox>[];
    try {
      started = await tenancy.admit(forks[0].tenant, () =>
        memory.copies!(
          checkpoint.sandbox,
          checkpoint.name,
          specs.map((spec, i) => ({ ...spec, keptWorkspace: workspaces[i] })),
          copied,
          true,
        ),
      );
    } catch (err) {
      for (const w of workspaces) await provider.dropWorkspace?.(w).catch(() => undefined);
      throw err;
    }
    await this.connectForks(forks, workspaces, started, notice);
    logger.info(
      { runId: parent.runId, forks: forks.length, depth: 'memory', kept: true, ms: Math.round(performance.now() - t0) },
      'run forked',
    );
  }

  /** Each fork connected to its started sandbox (READY, with `notice` for its first result), or FAILED with why. */
  private async connectForks(
    forks: RunRecord[],
    workspaces: string[],
    started: PromiseSettledResult<Sandbox>[],
    notice: string,
  ): Promise<void> {
    const { provider, lifecycle } = this.deps;
    await Promise.all(
      forks.map(async (fork, i) => {
        const result = started[i];
        if (result.status === 'rejected') {
          await provider.dropWorkspace?.(workspaces[i]).catch(() => undefined);
          fork.fail(`the fork could not be made: ${(result.reason as Error).message}`);
          return;
        }
        fork.pause = { depth: 'memory', pausedAt: new Date(), reason: 'fork', stateBytes: 0, notKept: [] };
        await this.reported(fork, 'resume', () => lifecycle.connect(fork, result.value)).then(
          () => fork.markResumed(notice),
          async (err: Error) => {
            await provider.remove(result.value.id).catch(() => undefined);
            fork.fail(`the fork could not be made: ${err.message}`);
          },
        );
      }),
    );
  }

  /**
   * The sandboxes of a memory fork, with the parent's part in it: the forks' workspaces made
   * meanwhile, the parent's runner quiesced, a checkpoint that leaves the sandbox running, the
   * workspace copied into each fork's while the runner is still quiet (the files the checkpoint
   * holds open are there), and the forks' containers readied beside that copy and started once
   * it is done; then the runner woken and reconnected. Undefined, with nothing left of it, when
   * the checkpoint, the workspaces or the copy failed. A parent whose sandbox does not come back
   * is paused on its files, as after a failed memory pause, and nothing of the forks is kept.
   */
  private async copiesOf(
    parent: RunRecord,
    specs: SandboxSpec[],
  ): Promise<{ workspaces: string[]; started: PromiseSettledResult<Sandbox>[] } | undefined> {
    const { provider, lifecycle, tenancy } = this.deps;
    const memory = provider.memory!;
    const made = provider.newWorkspaces!(specs);
    made.catch(() => undefined);
    const dropMade = async () => {
      for (const w of await made.catch(() => [])) await provider.dropWorkspace?.(w).catch(() => undefined);
    };
    const { sandbox, runner } = parent.beginPause();
    lifecycle.letGo(sandbox);
    try {
      await runner.quiesce(5000);
    } catch (err) {
      lifecycle.holdOn(sandbox);
      parent.pauseAbandoned();
      await dropMade();
      logger.warn(
        { runId: parent.runId, err: (err as Error).message },
        'memory fork: the runner could not be quiesced',
      );
      return undefined;
    }
    runner.dispose();
    let checkpoint: string | undefined;
    let started: Promise<PromiseSettledResult<Sandbox>[]> | undefined;
    let why = '';
    try {
      checkpoint = await this.whenQuiet(() => memory.snapshot!(sandbox.id));
      const workspaces = await made;
      const copied = provider.copyWorkspace!(sandbox.keepable!, workspaces, specs[0]?.image);
      copied.catch(() => undefined);
      const name = checkpoint;
      started = tenancy.admit(parent.tenant, () =>
        memory.copies!(
          sandbox.id,
          name,
          specs.map((spec, i) => ({ ...spec, keptWorkspace: workspaces[i] })),
          copied,
        ),
      );
      started.catch(() => undefined);
      await copied;
    } catch (err) {
      why = (err as Error).message;
    }
    parent.reconnecting();
    try {
      await lifecycle.connect(parent, await memory.wake(sandbox.id), undefined, true);
    } catch (err) {
      const gone = (err as Error).message;
      for (const r of (await started?.catch(() => [])) ?? [])
        if (r.status === 'fulfilled') await provider.remove(r.value.id).catch(() => undefined);
      await dropMade();
      await this.pausedAfterLoss(parent, sandbox.id, 'fork', why || 'a checkpoint for forks', gone);
      throw new GatewayError(
        status.UNAVAILABLE,
        `run ${parent.runId} could not be forked: its sandbox did not come back from the checkpoint (${gone}); it is paused on its files`,
      );
    }
    const results = why ? undefined : await started?.catch((err: Error) => void (why = err.message));
    if (results) return { workspaces: await made, started: results };
    // Once the copies' own clean-up has run (their containers discarded).
    await started?.catch(() => undefined);
    if (checkpoint) await memory.drop(sandbox.id, checkpoint).catch(() => undefined);
    await dropMade();
    logger.warn({ runId: parent.runId, err: why }, 'memory fork failed; forking at portable depth');
    return undefined;
  }

  /**
   * The run, ready for a call: a paused one (or one pausing now) is resumed first, and the
   * caller only waits for it.
   */
  async whenReady(tenant: string, runId: string): Promise<ReadyRun> {
    const run = this.deps.registry.get(tenant, runId);
    if (run.state === 'PAUSED' || run.state === 'PAUSING' || this.moving.has(runId)) await this.resume(tenant, runId);
    return this.deps.registry.ready(tenant, runId);
  }

  private async moveOnce(runId: string, move: () => Promise<void>): Promise<void> {
    const p = move().finally(() => this.moving.delete(runId));
    this.moving.set(runId, p);
    await p;
  }

  /**
   * Waits for the pause or resume under way, however it ends. Another caller may start one
   * meanwhile: callers look again (`moving`) before they move, with nothing awaited between.
   */
  private async settled(runId: string): Promise<void> {
    await this.moving.get(runId)?.catch(() => undefined);
  }

  /**
   * Pauses runs idle for `runs.idlePauseSeconds` (where their provider can, short of the idle
   * stop and of the tenant's paused limit), and stops paused runs past their retention or
   * their lifetime.
   */
  async sweep(now = Date.now()): Promise<void> {
    const { config, registry, provider } = this.deps;
    const { idlePauseSeconds, idleTimeoutSeconds, pausedRetentionSeconds, maxLifetimeSeconds } = config.runs;
    for (const run of registry.all()) {
      if (run.state === 'PAUSED') {
        const pausedFor = now - (run.pause?.pausedAt.getTime() ?? now);
        if (pausedRetentionSeconds > 0 && pausedFor > pausedRetentionSeconds * 1000)
          await this.deps.lifecycle.stop(run, `stopped: paused for more than ${pausedRetentionSeconds}s`);
        else if (maxLifetimeSeconds > 0 && now - run.createdAt.getTime() > maxLifetimeSeconds * 1000)
          await this.deps.lifecycle.stop(run, `stopped: reached the maximum lifetime of ${maxLifetimeSeconds}s`);
        continue;
      }
      const ready = run.ready();
      if (
        !ready ||
        idlePauseSeconds <= 0 ||
        (idleTimeoutSeconds > 0 && idlePauseSeconds >= idleTimeoutSeconds) ||
        // A replica sees only the calls made through it: idleness is not its to judge alone.
        provider.capabilities.sharedState ||
        this.pausable(run) ||
        ready.runner.busy ||
        now - ready.runner.lastActivity <= idlePauseSeconds * 1000
      )
        continue;
      await this.pause(run.tenant, run.runId, 'idle').catch((err: Error) =>
        logger.warn({ runId: run.runId, err: err.message }, 'idle run not paused'),
      );
    }
  }

  startSweeper(everyMs = 5000): void {
    this.sweeper = setInterval(() => void this.sweep(), everyMs);
    this.sweeper.unref();
  }

  async close(): Promise<void> {
    if (this.sweeper) clearInterval(this.sweeper);
    await Promise.all([...this.moving.values()].map((p) => p.catch(() => undefined)));
  }
}

/** What the first result after a resume says, in words a model can act on. */
function noticeOf(r: RestoreResult | undefined): string {
  if (!r) return '';
  if (r.outcome === 'torn')
    return `This run was paused and resumed, but its saved state was damaged (${r.problem ?? 'unreadable'}): nothing of it came back. Files in the workspace are intact; kernels start empty.`;
  return r.notice;
}

/** A memory copy restores into its parent's command, mounts and limits only: forks with no egress and the same limits. */
function sameSandbox(parent: RunRecord, forks: RunRecord[]): boolean {
  return forks.every((f) => !f.spec.egress && JSON.stringify(f.spec.limits) === JSON.stringify(parent.spec.limits));
}
