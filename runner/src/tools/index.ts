import type { ToolRegistry } from '../registry';
import type { RunContext } from '../run';
import { registerFiles } from './files';
import { registerEval } from './eval';
import { registerLsp } from './lsp';
import { registerAsk } from './ask';
import { registerVibe } from './vibe';
import { registerAst } from './ast';
import { registerDebug } from './debug';
import { registerProcess } from './process';
import { registerFs } from './fs';

/**
 * Wires each tool family whose resource the run has. A family decides for itself which of
 * its tools exist for this run (see the registration table in docs/DESIGN.md).
 */
export async function registerTools(registry: ToolRegistry, run: RunContext): Promise<void> {
  registerFiles(registry, run);
  registerEval(registry, run);
  registerLsp(registry, run);
  registerAsk(registry, run);
  registerVibe(registry, run);
  registerAst(registry, run);
  registerDebug(registry, run);
  registerProcess(registry, run);
  registerFs(registry, run);
}
