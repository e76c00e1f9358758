import type { ToolRegistry } from '../../registry';
import type { RunContext } from '../../run';
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
  registry.register(debugTool(supervisor));
  run.onStop(() => supervisor.stop());
}
