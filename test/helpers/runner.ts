import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { RunFeatures } from '../../protocol/src/run';
import { RunContext } from '../../runner/src/run';
import { ToolRegistry } from '../../runner/src/registry';
import { registerTools } from '../../runner/src/tools';
import type { ToolContext } from '../../runner/src/tool';

export function tempWorkspace(): string {
  return mkdtempSync(path.join(os.tmpdir(), 'tether-ws-'));
}

/** A ToolContext for calling tools directly in unit tests: no human, no bridge. */
export function runnerContext(over: Partial<ToolContext> = {}): ToolContext {
  return {
    callId: 'test',
    surface: { maxTier: 'exec' },
    signal: new AbortController().signal,
    progress: () => undefined,
    ask: async () => ({ kind: 'unavailable', reason: 'no human in unit tests' }),
    callTool: async (name) => ({
      content: [{ type: 'text', text: `no bridge for ${name} in unit tests` }],
      isError: true,
    }),
    ...over,
  };
}

export const NO_FEATURES: RunFeatures = {
  lsp: false,
  ast: false,
  debug: false,
  eval: false,
  questions: { enabled: false, targetSpace: '' },
  vibe: false,
};

/** A runner's registry over a fresh temp workspace, as the runner builds it at initialize. */
export async function runnerFor(
  features: Partial<RunFeatures> = {},
  settings: Record<string, unknown> = {},
  workspace = tempWorkspace(),
  runId = 'run-test',
) {
  const run = new RunContext({
    runId,
    conversationId: 'conv-test',
    workspace,
    features: { ...NO_FEATURES, ...features },
    settings,
  });
  const registry = new ToolRegistry(run.workspace.root);
  await registerTools(registry, run);
  return {
    run,
    registry,
    workspace,
    call: (tool: string, args: unknown, ctx = runnerContext()) => registry.call(tool, args, ctx),
  };
}
