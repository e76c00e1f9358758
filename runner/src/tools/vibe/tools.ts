import { ok, type ToolDefinition } from '../../tool';
import type { ToolResult } from '../../../../protocol/src/tools';
import type { Worker, WorkerRoster, WorkerView } from './roster';
import {
  killSchema,
  listSchema,
  sendSchema,
  spawnSchema,
  waitSchema,
  type KillArgs,
  type SendArgs,
  type SpawnArgs,
  type WaitArgs,
} from './schemas';

function seconds(s: number): string {
  if (s < 60) return `${s.toFixed(1)}s`;
  const m = Math.floor(s / 60);
  return m < 60
    ? `${m}m${String(Math.round(s % 60)).padStart(2, '0')}s`
    : `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}

function oneLine(s: string, max: number): string {
  const flat = s.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max)}…` : flat;
}

function headline(v: WorkerView): string {
  return `${v.id} "${v.label}" (${v.tier}) ${v.status}, ${seconds(v.elapsed_seconds)}${v.rounds > 1 ? `, round ${v.rounds}` : ''}`;
}

function settledText(v: WorkerView): string {
  return `${headline(v)}\n${v.last_result ? `result:\n${v.last_result}` : 'no result'}`;
}

function result(roster: WorkerRoster, w: Worker, text: string): ToolResult {
  return ok(text, roster.view(w));
}

export function vibeTools(roster: WorkerRoster, waitDefaultSeconds: number): ToolDefinition[] {
  const spawn: ToolDefinition<SpawnArgs> = {
    name: 'vibe_spawn',
    description:
      'Start a background worker on a brief and return at once with its id; it keeps running while you go on. ' +
      'tier "fast" for mechanical work with a clear spec, "good" for design, judgement or reviewing a fast worker. Check on it with vibe_wait or vibe_list.',
    tier: 'read',
    inputSchema: spawnSchema,
    parallelSafe: true,
    async run(args) {
      const w = roster.spawn({ brief: args.brief, label: args.label.trim() || 'worker', tier: args.tier ?? 'fast' });
      return result(
        roster,
        w,
        `started ${w.id} "${w.label}" (${w.tier}). It runs in the background: vibe_wait ${w.id} for its result.`,
      );
    },
  };
  const send: ToolDefinition<SendArgs> = {
    name: 'vibe_send',
    description:
      "Append a message to a worker's brief and run it again on the whole brief (a round still running is stopped first). Returns at once.",
    tier: 'read',
    inputSchema: sendSchema,
    parallelSafe: true,
    async run(args) {
      const w = await roster.send(args.worker_id, args.message);
      return result(
        roster,
        w,
        `${w.id} "${w.label}" runs again (round ${w.round}) with the message appended to its brief.`,
      );
    },
  };
  const wait: ToolDefinition<WaitArgs> = {
    name: 'vibe_wait',
    description:
      'Block until a worker settles (done, failed or killed) or timeout_seconds pass, then report its status and last result.',
    tier: 'read',
    inputSchema: waitSchema,
    parallelSafe: true,
    async run(args, ctx) {
      const limit = args.timeout_seconds ?? waitDefaultSeconds;
      const { settled, worker } = await roster.wait(args.worker_id, limit * 1000, ctx.signal);
      const v = roster.view(worker);
      if (settled) return ok(settledText(v), v);
      return ok(
        `${headline(v)}: still running (waited ${seconds(limit)}).${v.progress ? ` Latest progress: ${v.progress}` : ''} Wait again, or go on and check later.`,
        { ...v, still_running: true },
      );
    },
  };
  const kill: ToolDefinition<KillArgs> = {
    name: 'vibe_kill',
    description: 'Stop a worker (for a command worker, its whole process tree). Its last result stays in the roster.',
    tier: 'read',
    inputSchema: killSchema,
    parallelSafe: true,
    async run(args) {
      const { worker, wasRunning } = await roster.kill(args.worker_id);
      return result(
        roster,
        worker,
        wasRunning
          ? `killed ${worker.id} "${worker.label}".`
          : `${worker.id} "${worker.label}" had already settled (${worker.status}); nothing to stop.`,
      );
    },
  };
  const list: ToolDefinition<Record<string, never>> = {
    name: 'vibe_list',
    description: "The roster of this run's workers: tier, status, elapsed time and last result of each.",
    tier: 'read',
    inputSchema: listSchema,
    parallelSafe: true,
    async run() {
      const views = roster.list().map((w) => roster.view(w));
      if (views.length === 0) return ok('no workers yet (vibe_spawn starts one).', { workers: [] });
      const lines = views.map((v) => {
        const extra =
          v.status === 'running'
            ? v.progress
              ? ` — ${oneLine(v.progress, 120)}`
              : ''
            : v.last_result
              ? ` — ${oneLine(v.last_result, 200)}`
              : '';
        return `${headline(v)}${extra}`;
      });
      return ok(`${roster.liveCount} running, ${views.length} in all:\n${lines.join('\n')}`, { workers: views });
    },
  };
  return [spawn, send, wait, kill, list];
}
