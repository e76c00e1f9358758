import type { ToolRegistry } from '../registry';
import type { RunContext } from '../run';
import { registerFiles } from './files';

/**
 * Wires each tool family whose resource the run has. A family decides for itself which of
 * its tools exist for this run (see the registration table in docs/DESIGN.md).
 */
export async function registerTools(registry: ToolRegistry, run: RunContext): Promise<void> {
  registerFiles(registry, run);
}
