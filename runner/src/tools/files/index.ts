import type { ToolRegistry } from '../../registry';
import type { RunContext } from '../../run';
import { readTool } from './read';
import { editTool, writeTool } from './write';
import { applyPatchTool } from './applyPatch';

/** The workspace file tools are always wired: every run has a workspace. */
export function registerFiles(registry: ToolRegistry, run: RunContext): void {
  registry.register(readTool(run));
  registry.register(writeTool(run));
  registry.register(editTool(run));
  registry.register(applyPatchTool(run));
}
