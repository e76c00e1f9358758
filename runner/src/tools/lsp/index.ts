import * as path from 'node:path';
import { ProbeCommand } from '../../../../protocol/src/lsp';
import { jsonHook } from '../../portable';
import type { ToolRegistry } from '../../registry';
import type { RunContext } from '../../run';
import { ToolError, type ToolDefinition } from '../../tool';
import { runLspAction } from './actions';
import { DiagnosticsOnWrite } from './diagnosticsOnWrite';
import { DiagnosticsLedger } from './ledger';
import { probe } from './probe';
import { renameSymbol } from './rename';
import { lspRenameSchema, lspSchema, type LspArgs, type LspRenameArgs } from './schemas';
import { DEFAULT_LSP_SETTINGS, LspSession } from './session';

/** A server that dies or misbehaves mid-call is the model's to read about, not a runner fault. */
async function asToolError<T>(p: Promise<T>): Promise<T> {
  try {
    return await p;
  } catch (err) {
    if (err instanceof ToolError || typeof (err as NodeJS.ErrnoException)?.code === 'string') throw err;
    throw new ToolError(`language server failure: ${(err as Error)?.message ?? String(err)}`);
  }
}

/**
 * Registers `lsp` (read) and `lsp_rename` (write) when the run has the language-server
 * supervisor wired, and wraps file writes with diagnostics. Whether a server can actually run
 * for a file is decided per call (root marker AND binary), so the tools stay visible and
 * `lsp status` can say why not.
 */
export function registerLsp(registry: ToolRegistry, run: RunContext): void {
  if (!run.features.lsp) return;
  const session = new LspSession(run.workspace, run.settingsFor('lsp', DEFAULT_LSP_SETTINGS));
  session.supervisor.lifecycle = run.resources.lifecycle('language_server');
  session.supervisor.startups = run.startups;
  const ledger = new DiagnosticsLedger();
  run.observeWrites(new DiagnosticsOnWrite(session, ledger));
  // What the agent was told about each file's diagnostics outlives a pause (the servers do not:
  // they start again on first use).
  const root = run.workspace.root;
  run.portable.keep(
    'lsp',
    jsonHook(
      'diagnostics-ledger.json',
      () => {
        const data = Object.fromEntries(
          Object.entries(ledger.toPortable()).map(([abs, keys]) => [path.relative(root, abs), keys]),
        );
        return { data, counts: { 'files in the diagnostics ledger': Object.keys(data).length }, notKept: [] };
      },
      (data: Record<string, string[]>) => {
        const files = ledger.fromPortable(
          Object.fromEntries(Object.entries(data).map(([rel, keys]) => [path.join(root, rel), keys])),
        );
        return { counts: { 'files in the diagnostics ledger': files }, notKept: [] };
      },
    ),
  );
  run.onStop(() => session.supervisor.stopAll());
  run.handleCommand(ProbeCommand.type, (params) => probe(session, params));

  const lsp: ToolDefinition<LspArgs> = {
    name: 'lsp',
    description:
      'Ask the language server about code. Positions are a 1-based line plus a symbol substring on that line (never a column). ' +
      'Actions: diagnostics (file, or "*" for the project checker), definition, type_definition, implementation, references (max 50), ' +
      'hover, code_actions (file+line+symbol), symbols (query: workspace search max 100, or file: outline max 200), status, reload (optional file).',
    tier: 'read',
    inputSchema: lspSchema,
    parallelSafe: true,
    run: (args, ctx) => asToolError(runLspAction(session, ledger, args, ctx)),
  };
  const lspRename: ToolDefinition<LspRenameArgs> = {
    name: 'lsp_rename',
    description:
      'Rename a symbol across the project through the language server: every file changes or none. Locate it by 1-based line and a symbol substring on that line.',
    tier: 'write',
    inputSchema: lspRenameSchema,
    parallelSafe: false,
    run: (args, ctx) => asToolError(renameSymbol(run, session, args, ctx)),
  };
  registry.register(lsp);
  registry.register(lspRename);
}
