import { randomUUID } from 'node:crypto';
import { status } from '@grpc/grpc-js';
import type { GatewayConfig } from '../config';
import { GatewayError } from '../errors';
import { logger } from '../log';
import type { ProcessService } from '../processes/ProcessService';
import type { RunLifecycle } from '../runs/RunLifecycle';
import type { RunPauses } from '../runs/RunPauses';
import { RunRecord, type RunSpec } from '../runs/RunRecord';
import type { RunRegistry } from '../runs/RunRegistry';
import type { TemplateCatalog } from '../templates/catalog';
import { SNAPSHOT_TENANT } from '../templates/naming';
import type { Warmup } from '../templates/warmup';
import { runWarmup } from './warmup';

const RETRY_FAILED_MS = 60_000;
/** Whether a snapshot's run is still there to fork (its lifetime or a delete ends it like any run's). */
const alive = (s: Snapshot) => ['PAUSED', 'PAUSING', 'READY'].includes(s.run?.state ?? '');
const mib = (bytes: number) => Math.round((bytes / 2 ** 20) * 10) / 10;

export interface TemplateSnapshotsDeps {
  config: GatewayConfig;
  lifecycle: RunLifecycle;
  pauses: RunPauses;
  registry: RunRegistry;
  templates: Pick<TemplateCatalog, 'warmupOf'>;
  processes: Pick<ProcessService, 'start'>;
}

/** One template image's snapshot for runs of one shape: the gateway's own paused run, warmed. */
interface Snapshot {
  key: string;
  template: string;
  image: string;
  state: 'making' | 'ready' | 'failed';
  run?: RunRecord;
  madeAt?: Date;
  warmupMs?: number;
  /** Bytes its pause kept beside the workspace (the checkpoint, or the kernels' state). */
  stateBytes?: number;
  /** Why it failed, or what its warm-up left out. */
  why?: string;
}

/**
 * Runs that start warm from their template's snapshot. A template whose image carries a
 * warm-up (`warmup.json`) gets, on first use, a run of the gateway's own (tenant
 * SNAPSHOT_TENANT) of the same shape as the run asking (image, features, limits) that runs the
 * warm-up and is paused: at memory depth where the provider checkpoints (every process with
 * its memory: language servers with their index, kernels), else at portable depth (workspace
 * and kernel state). Each later CreateRun of that shape is a fork of it into the tenant, the
 * same restore as ForkRun. The snapshot belongs to its image's tag, the hash of what built it
 * (template and runner image), so a rebuilt template is never served an older snapshot. Until
 * a snapshot is ready, or where a run cannot start from one, the run starts cold and GetRun's
 * `start_note` says why.
 */
export class TemplateSnapshots {
  private readonly snapshots = new Map<string, Snapshot>();
  private closed = false;

  constructor(private readonly deps: TemplateSnapshotsDeps) {
    for (const tenant of Object.values(deps.config.tokens))
      if (tenant === SNAPSHOT_TENANT)
        throw new Error(`tenant ${SNAPSHOT_TENANT} is the gateway's own (template snapshots): no token may name it`);
  }

  /** CreateRun: from the template's snapshot where one is ready and fits, else as any run starts. */
  async create(tenant: string, requested: RunSpec): Promise<RunRecord> {
    const { lifecycle } = this.deps;
    const admitted = await lifecycle.admitSpec(tenant, requested);
    const { spec, image, hostWorkspace } = admitted;
    if (!image || tenant === SNAPSHOT_TENANT) return lifecycle.create(tenant, requested, admitted);
    const template = spec.template ?? '';
    let warmup: Warmup | undefined;
    let note: string | undefined;
    try {
      warmup = await this.deps.templates.warmupOf(template, image);
    } catch (err) {
      note = `started cold: ${(err as Error).message}`;
    }
    if (warmup && hostWorkspace)
      note = 'started cold: a run on a host workspace does not start from its template snapshot';
    else if (warmup) {
      const snapshot = this.snapshotFor(template, image, spec, warmup);
      if (snapshot.state === 'ready' && snapshot.run) {
        try {
          return await this.fromSnapshot(tenant, spec, snapshot);
        } catch (err) {
          // A quota says no to the run whichever way it starts; anything else, a cold start says why.
          if (err instanceof GatewayError && err.code === status.RESOURCE_EXHAUSTED) throw err;
          // Made again a minute on, rather than every run paying for a snapshot that does not restore.
          snapshot.state = 'failed';
          snapshot.why = `starting from it failed: ${(err as Error).message}`;
          snapshot.madeAt = new Date();
          note = `started cold: starting from the snapshot of template ${template} failed: ${(err as Error).message}`;
        }
      } else
        note =
          snapshot.state === 'making'
            ? `started cold: the snapshot of template ${template} is being made`
            : `started cold: the snapshot of template ${template} could not be made: ${snapshot.why}`;
    }
    const run = await lifecycle.create(tenant, requested, admitted);
    if (note) run.startNote = note;
    return run;
  }

  /** The snapshot of this shape: the one kept, or one being made now (in the background). */
  private snapshotFor(template: string, image: string, spec: RunSpec, warmup: Warmup): Snapshot {
    const key = JSON.stringify([image, spec.features, spec.limits]);
    const known = this.snapshots.get(key);
    // A snapshot's run ends like any (its lifetime, a delete): the next run asking makes it again;
    // one that failed is tried again a minute on.
    if (
      known &&
      (known.state === 'making' ||
        (known.state === 'ready' && alive(known)) ||
        (known.state === 'failed' && Date.now() - (known.madeAt?.getTime() ?? 0) < RETRY_FAILED_MS))
    )
      return known;
    // Here `known`, if any, ended or failed a while ago: pruned with the others that count for nothing.
    this.prune(template, image);
    if (this.snapshots.size >= this.deps.config.templates.maxSnapshots)
      return {
        key,
        template,
        image,
        state: 'failed',
        why: `the gateway keeps ${this.deps.config.templates.maxSnapshots} snapshots at most (templates.maxSnapshots), of templates and run shapes (features, limits) asked for first`,
      };
    const snapshot: Snapshot = { key, template, image, state: 'making' };
    this.snapshots.set(key, snapshot);
    void this.make(snapshot, spec, warmup);
    return snapshot;
  }

  /**
   * Lets go of the snapshots that count for nothing any more: those of an older image of this
   * template (rebuilt since: never served again), and those whose run ended or that failed a while
   * ago. Only they free a place under templates.maxSnapshots.
   */
  private prune(template: string, image: string): void {
    for (const [key, s] of this.snapshots) {
      const superseded = s.template === template && s.image !== image && s.state !== 'making';
      const ended = s.state === 'ready' && !alive(s);
      const stale = s.state === 'failed' && Date.now() - (s.madeAt?.getTime() ?? 0) >= RETRY_FAILED_MS;
      if (!superseded && !ended && !stale) continue;
      this.snapshots.delete(key);
      if (s.run) void this.deps.lifecycle.delete(SNAPSHOT_TENANT, s.run.runId).catch(() => undefined);
    }
  }

  private async make(snapshot: Snapshot, shape: RunSpec, warmup: Warmup): Promise<void> {
    const { lifecycle, pauses, processes } = this.deps;
    const t0 = performance.now();
    let run: RunRecord | undefined;
    try {
      run = await lifecycle.create(SNAPSHOT_TENANT, {
        conversationId: `template-snapshot ${snapshot.template}`,
        workspace: '',
        // Its commands are the gateway's own warm-up; the runs from it have their own features.commands.
        features: { ...shape.features, commands: true },
        approvals: { write: 'AUTO', exec: 'AUTO' },
        labels: { 'tether.template-snapshot': snapshot.template },
        limits: shape.limits,
        template: snapshot.template,
      });
      if (run.state !== 'READY') throw new Error(run.error || `its run is ${run.state.toLowerCase()}`);
      const id = run.runId;
      const report = await runWarmup(SNAPSHOT_TENANT, id, warmup, {
        processes,
        ready: () => pauses.whenReady(SNAPSHOT_TENANT, id),
      });
      if (this.closed) throw new Error('the gateway is closing');
      await pauses.pause(SNAPSHOT_TENANT, id, 'template snapshot');
      snapshot.run = run;
      snapshot.warmupMs = report.ms;
      snapshot.stateBytes = run.pause?.stateBytes ?? 0;
      snapshot.madeAt = new Date();
      if (report.skipped.length) snapshot.why = `left out: ${report.skipped.join('; ')}`;
      snapshot.state = 'ready';
      logger.info(
        {
          template: snapshot.template,
          image: snapshot.image,
          runId: id,
          warmupMs: report.ms,
          depth: run.pause?.depth,
          stateBytes: run.pause?.stateBytes,
          ms: Math.round(performance.now() - t0),
          ...(report.skipped.length ? { skipped: report.skipped } : {}),
        },
        'template snapshot made',
      );
    } catch (err) {
      snapshot.state = 'failed';
      snapshot.why = (err as Error).message;
      snapshot.madeAt = new Date();
      logger.warn(
        { template: snapshot.template, image: snapshot.image, err: snapshot.why },
        'template snapshot failed',
      );
      if (run) await lifecycle.delete(SNAPSHOT_TENANT, run.runId).catch(() => undefined);
    }
  }

  /** The tenant's run, forked from the snapshot: its own copy of the workspace and of what the snapshot kept. */
  private async fromSnapshot(tenant: string, spec: RunSpec, snapshot: Snapshot): Promise<RunRecord> {
    const { pauses, lifecycle } = this.deps;
    const parent = snapshot.run!;
    const t0 = performance.now();
    const run = new RunRecord(
      `run-${randomUUID()}`,
      tenant,
      { ...spec, forkedFrom: parent.runId },
      new Date(),
      'template',
    );
    const made = snapshot.madeAt!.toISOString();
    run.startNote = `restored from the snapshot of template ${snapshot.template} made at ${made} (warm-up ${snapshot.warmupMs} ms, ${mib(snapshot.stateBytes ?? 0)} MiB of state${snapshot.why ? `; ${snapshot.why}` : ''})`;
    try {
      await pauses.forkInto(
        parent,
        [run],
        `This run started from the snapshot of its template ${snapshot.template} (made at ${made}): its language servers, kernels and workspace are as the template's warm-up left them.`,
        { keepPaused: true },
      );
      if (run.state === 'FAILED') throw new Error(run.error);
    } catch (err) {
      if (this.deps.registry.find(run.runId)) await lifecycle.delete(tenant, run.runId).catch(() => undefined);
      throw err;
    }
    if (run.pause) run.startNote += `, at ${run.pause.depth} depth`;
    lifecycle.reportStarted(run, performance.now() - t0, false);
    return run;
  }

  /**
   * Removes the snapshots an earlier gateway left (found by recovery): this one knows nothing of
   * how they were made, and each holds a workspace and maybe a checkpoint. They are made again
   * on first use.
   */
  async dropLeftovers(): Promise<number> {
    const left = this.deps.registry.all().filter((r) => r.tenant === SNAPSHOT_TENANT);
    for (const r of left) await this.deps.lifecycle.delete(SNAPSHOT_TENANT, r.runId).catch(() => undefined);
    return left.length;
  }

  close(): void {
    this.closed = true;
  }
}
