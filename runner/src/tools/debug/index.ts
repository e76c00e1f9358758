import type { ToolRegistry } from '../../registry';
import type { RunContext } from '../../run';
import * as path from 'node:path';
import { jsonHook } from '../../portable';
import { debugTool } from './debugTool';
import { DEFAULT_DEBUG_SETTINGS, DebugSupervisor } from './supervisor';

/**
 * The debugger is wired when the run asks for it and has a conversation to own the session.
 * Whether an adapter can start here is decided per call (`adapters`, `launch`).
 */
export function registerDebug(registry: ToolRegistry, run: RunContext): void {
  if (!run.features.debug || !run.conversationId) return;
  const supervisor = new DebugSupervisor(
    run.conversationId,
    run.workspace,
    run.settingsFor('debug', DEFAULT_DEBUG_SETTINGS),
  );
  // Breakpoints outlive a pause; a live session (the adapter and its program) cannot.
  const root = run.workspace.root;
  run.portable.keep(
    'debug',
    jsonHook(
      'breakpoints.json',
      () => {
        const live = supervisor.live;
        return {
          data: [...supervisor.breakpoints].map(([file, lines]) => [path.relative(root, file), lines] as const),
          counts: { 'files with breakpoints': supervisor.breakpoints.size },
          notKept: live
            ? [
                {
                  what: `the debug session (${live.adapter})`,
                  why: 'a paused run keeps no processes: the program under the debugger was stopped; launch it again (the breakpoints are kept)',
                },
              ]
            : [],
        };
      },
      (data: (readonly [string, number[]])[]) => {
        for (const [rel, lines] of data) supervisor.breakpoints.set(path.join(root, rel), lines);
        return { counts: { 'files with breakpoints': data.length }, notKept: [] };
      },
    ),
  );
  registry.register(debugTool(supervisor));
  run.onStop(() => supervisor.stop());
}
