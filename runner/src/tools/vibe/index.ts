import type { ToolRegistry } from '../../registry';
import type { RunContext } from '../../run';
import { ClientWorkerBackend } from './clientBackend';
import { CommandWorkerBackend } from './commandBackend';
import {
  ReportCommand,
  WatchersCommand,
  WorkerEvent,
  type ReportPayload,
  type ReportReply,
  type WorkerTier,
} from '../../../../protocol/src/workers';
import { WorkerRoster, type PortableRoster, type WorkerBackend } from './roster';
import { jsonHook } from '../../portable';
import { MAX_TOTAL_BRIEF_CHARS } from './schemas';
import { vibeSettings } from './settings';
import { vibeTools } from './tools';

const STATUSES = new Set(['running', 'done', 'failed', 'killed']);

/** The five vibe_* tools and the run's worker roster, only while vibe mode is on. */
export function registerVibe(registry: ToolRegistry, run: RunContext): void {
  if (!run.features.vibe) return;
  const settings = vibeSettings(run);
  const client = new ClientWorkerBackend((payload) => run.emit(WorkerEvent.type, payload));
  const backends = new Map<WorkerTier, WorkerBackend>();
  const roster: WorkerRoster = new WorkerRoster(
    { maxLiveWorkers: settings.maxLiveWorkers, maxWorkers: settings.maxWorkers, maxBriefChars: MAX_TOTAL_BRIEF_CHARS },
    (tier) => backends.get(tier)!,
  );
  for (const tier of ['fast', 'good'] as const) {
    const cfg = settings.tiers[tier];
    backends.set(
      tier,
      cfg.backend === 'client'
        ? client
        : new CommandWorkerBackend(cfg, run.workspace.root, settings, {
            settle: (id, round, status, text) => roster.settle(id, round, status, text),
            progress: (id, round, text) => roster.progress(id, round, text),
          }),
    );
  }

  run.handleCommand(WatchersCommand.type, ({ count }) => {
    client.setWatchers(count);
    return client.snapshot(roster.list());
  });
  run.handleCommand(ReportCommand.type, (payload) => report(roster, payload, settings.outputLimitBytes));
  run.onStop(() => roster.stopAll());
  // The roster outlives a pause; its running rounds cannot.
  run.portable.keep(
    'vibe',
    jsonHook(
      'workers.json',
      () => {
        const data = roster.toPortable();
        const running = data.workers.filter((w) => w.status === 'running');
        return {
          data,
          counts: { workers: data.workers.length },
          notKept: running.map((w) => ({
            what: `worker ${w.id} (${w.label}), running`,
            why: 'a paused run keeps no processes: its round was stopped and comes back killed; vibe_send it to run again',
          })),
        };
      },
      (data: PortableRoster) => {
        roster.fromPortable(data);
        return { counts: { workers: data.workers.length }, notKept: [] };
      },
    ),
  );
  for (const tool of vibeTools(roster, settings.waitDefaultSeconds)) registry.register(tool);
}

/** ReportWorker from the platform: progress while running, or the result that settles the round. */
function report(roster: WorkerRoster, r: ReportPayload, maxChars: number): ReportReply {
  if (!STATUSES.has(r.status))
    return { ok: false, code: 'invalid', message: 'status must be RUNNING, DONE, FAILED or KILLED' };
  const w = roster.list().find((x) => x.id === r.workerId);
  if (!w) return { ok: false, code: 'not_found', message: `no worker ${r.workerId} in this run` };
  if (w.backend !== 'client')
    return {
      ok: false,
      code: 'not_client',
      message: `worker ${w.id} is run by a command inside the run, not by the platform`,
    };
  if (w.status !== 'running')
    return {
      ok: false,
      code: 'settled',
      message: `worker ${w.id} has already settled (${w.status}); reports for it are ignored`,
    };
  const text = String(r.text ?? '');
  const kept =
    text.length > maxChars
      ? `[the first ${text.length - maxChars} characters were left out]\n${text.slice(-maxChars)}`
      : text;
  if (r.status === 'running') roster.progress(w.id, w.round, kept.slice(-300));
  else roster.settle(w.id, w.round, r.status, kept);
  return { ok: true };
}
