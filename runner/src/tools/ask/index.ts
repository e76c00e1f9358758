import type { ToolRegistry } from '../../registry';
import type { RunContext } from '../../run';
import { UnansweredQuestions, askUserTool } from './askUser';

/** ask_user exists only when the run has a question port and somewhere to show the card. */
export function registerAsk(registry: ToolRegistry, run: RunContext): void {
  const q = run.features.questions;
  if (!q?.enabled || !q.targetSpace?.trim()) return;
  registry.register(askUserTool(new UnansweredQuestions()));
}
