import { readFileSync } from 'node:fs';
import type { RequestType } from 'vscode-jsonrpc';
import {
  CodeActionRequest,
  DefinitionRequest,
  DocumentSymbolRequest,
  HoverRequest,
  ImplementationRequest,
  ReferencesRequest,
  TypeDefinitionRequest,
  WorkspaceSymbolRequest,
  type Diagnostic,
  type Hover,
  type Location,
  type LocationLink,
  type MarkedString,
  type MarkupContent,
  type Position,
  type Range,
  type ServerCapabilities,
  type TextDocumentPositionParams,
} from 'vscode-languageserver-protocol';
import type { ToolResult } from '../../../../protocol/src/tools';
import { ToolError, ok, type ToolContext } from '../../tool';
import { runProjectCheckers } from './checker';
import { capped, foldRepeats } from './format';
import type { DiagnosticsLedger } from './ledger';
import { locateSymbol } from './position';
import {
  DOCUMENT_SYMBOLS_CAP,
  REFERENCES_CAP,
  WORKSPACE_SYMBOLS_CAP,
  type LspArgs,
  type NavigationAction,
} from './schemas';
import { errorsAndWarnings, type LspSession, type SyncedFile } from './session';
import { formatStatus } from './statusReport';

const HOVER_MAX_CHARS = 4000;

type Located = { synced: SyncedFile; position: Position; range: Range };

/** Resolves file + line + symbol to a synced document and a UTF-16 position on it. */
export async function locate(
  session: LspSession,
  args: { file?: string; line?: number; symbol?: string; occurrence?: number },
  action: string,
): Promise<Located> {
  if (!args.file) throw new ToolError(`${action} needs file`);
  if (args.line === undefined) throw new ToolError(`${action} needs line (1-based)`);
  if (!args.symbol)
    throw new ToolError(
      `${action} needs symbol: a substring of line ${args.line} naming what you mean (columns are never guessed)`,
    );
  const abs = await session.resolveFile(args.file);
  const placement = await session.placeOrFail(abs);
  const text = readFileSync(abs, 'utf8');
  const { position, range } = locateSymbol(text, args.line, args.symbol, args.occurrence);
  const synced = await session.sync(abs, placement, text);
  return { synced, position, range };
}

function header(synced: SyncedFile, what: string): string {
  return synced.handle.readyNote ? `${what}\nnote: ${synced.handle.readyNote}` : what;
}

function hoverText(h: Hover | null): string {
  if (!h) return '';
  const part = (c: MarkupContent | MarkedString): string =>
    typeof c === 'string' ? c : 'kind' in c ? c.value : `\`\`\`${c.language}\n${c.value}\n\`\`\``;
  const text = Array.isArray(h.contents) ? h.contents.map(part).join('\n\n') : part(h.contents);
  return text.length > HOVER_MAX_CHARS ? `${text.slice(0, HOVER_MAX_CHARS)}\n… (cut)` : text;
}

const NAV_REQUEST: Record<
  Exclude<NavigationAction, 'hover' | 'code_actions' | 'references'>,
  RequestType<TextDocumentPositionParams, Location | Location[] | LocationLink[] | null, unknown>
> = {
  definition: DefinitionRequest.type,
  type_definition: TypeDefinitionRequest.type,
  implementation: ImplementationRequest.type,
};

const CAPABILITY: Record<NavigationAction, keyof ServerCapabilities> = {
  definition: 'definitionProvider',
  type_definition: 'typeDefinitionProvider',
  implementation: 'implementationProvider',
  references: 'referencesProvider',
  hover: 'hoverProvider',
  code_actions: 'codeActionProvider',
};

export async function navigate(
  session: LspSession,
  action: NavigationAction,
  args: LspArgs,
  ctx: ToolContext,
): Promise<ToolResult> {
  const { synced, position, range } = await locate(session, args, action);
  if (!synced.handle.client.capabilities[CAPABILITY[action]])
    throw new ToolError(`${synced.handle.spec.id} does not offer ${action} (the server lacks ${CAPABILITY[action]})`);
  const where = `${session.format.display(synced.abs)}:${args.line} ${JSON.stringify(args.symbol)}`;
  const textDocument = { uri: synced.uri };
  if (action === 'hover') {
    const h = await session.request(synced.handle, HoverRequest.type, { textDocument, position }, ctx.signal);
    const text = hoverText(h);
    return ok(header(synced, text ? `hover ${where}:\n${text}` : `no hover information at ${where}`));
  }
  if (action === 'code_actions') {
    const published = synced.handle.client.published(synced.uri);
    const onLine = (published?.diagnostics ?? []).filter(
      (d: Diagnostic) => d.range.start.line <= range.start.line && d.range.end.line >= range.start.line,
    );
    const actions = await session.request(
      synced.handle,
      CodeActionRequest.type,
      { textDocument, range, context: { diagnostics: onLine, triggerKind: 1 } },
      ctx.signal,
    );
    const list = (actions ?? []).map((a) => {
      const kind = 'kind' in a && a.kind ? ` [${a.kind}]` : '';
      const preferred = 'isPreferred' in a && a.isPreferred ? ' (preferred)' : '';
      const fixes =
        'diagnostics' in a && a.diagnostics?.length
          ? ` — fixes: ${a.diagnostics.map((d) => d.message.split('\n')[0]).join('; ')}`
          : '';
      return `${a.title}${kind}${preferred}${fixes}`;
    });
    if (list.length === 0)
      return ok(header(synced, `no code actions at ${where}${onLine.length ? '' : ' (no diagnostics on this line)'}`));
    return ok(header(synced, `${list.length} code action(s) at ${where}:\n${list.map((l) => `- ${l}`).join('\n')}`), {
      actions: list,
    });
  }
  const raw =
    action === 'references'
      ? await session.request(
          synced.handle,
          ReferencesRequest.type,
          { textDocument, position, context: { includeDeclaration: true } },
          ctx.signal,
        )
      : await session.request(synced.handle, NAV_REQUEST[action], { textDocument, position }, ctx.signal);
  const locs = raw === null ? [] : Array.isArray(raw) ? raw : [raw];
  const lines = await session.format.locations(locs);
  const noun =
    action === 'references'
      ? 'references'
      : action === 'definition'
        ? 'definition(s)'
        : action === 'type_definition'
          ? 'type definition(s)'
          : 'implementation(s)';
  if (lines.length === 0) return ok(header(synced, `no ${noun} found for ${where}`));
  const cut = capped(lines, REFERENCES_CAP, noun);
  return ok(header(synced, `${cut.note} for ${where}:\n${foldRepeats(cut.lines).join('\n')}`), {
    locations: cut.lines,
    total: lines.length,
  });
}

async function symbols(session: LspSession, args: LspArgs, ctx: ToolContext): Promise<ToolResult> {
  if (args.file && args.query)
    throw new ToolError('symbols takes either query (workspace search) or file (outline), not both');
  if (args.file) {
    const abs = await session.resolveFile(args.file);
    const synced = await session.sync(abs);
    const raw = await session.request(
      synced.handle,
      DocumentSymbolRequest.type,
      { textDocument: { uri: synced.uri } },
      ctx.signal,
    );
    const lines = session.format.documentSymbols(raw ?? []);
    const cut = capped(lines, DOCUMENT_SYMBOLS_CAP, 'symbols');
    return ok(header(synced, `${cut.note} in ${session.format.display(abs)}:\n${cut.lines.join('\n')}`), {
      symbols: cut.lines,
      total: lines.length,
    });
  }
  if (!args.query) throw new ToolError("symbols needs query (workspace search) or file (that file's outline)");
  // Workspace search goes to every server that runs or can run for a root of this workspace.
  const results: string[] = [];
  const { handles, failures: notes } = await session.supervisor.handlesForWorkspace();
  if (handles.length === 0)
    throw new ToolError(
      `no language server can run in this workspace; see lsp status${notes.length ? `\n${notes.join('\n')}` : ''}`,
    );
  for (const h of handles) {
    try {
      const raw = await session.request(h, WorkspaceSymbolRequest.type, { query: args.query }, ctx.signal);
      results.push(...(await session.format.workspaceSymbols(raw ?? [])));
    } catch (err) {
      notes.push(`${h.spec.id} (${session.supervisor.describeRoot(h.root)}): ${(err as Error).message}`);
    }
    if (h.readyNote) notes.push(h.readyNote);
  }
  const unique = [...new Set(results)];
  const cut = capped(unique, WORKSPACE_SYMBOLS_CAP, 'symbols');
  const body =
    unique.length === 0
      ? `no symbols match ${JSON.stringify(args.query)}`
      : `${cut.note} matching ${JSON.stringify(args.query)}:\n${cut.lines.join('\n')}`;
  return ok(notes.length ? `${body}\nnotes:\n${notes.map((n) => `- ${n}`).join('\n')}` : body, {
    symbols: cut.lines,
    total: unique.length,
  });
}

async function diagnostics(
  session: LspSession,
  ledger: DiagnosticsLedger,
  args: LspArgs,
  ctx: ToolContext,
): Promise<ToolResult> {
  if (!args.file) throw new ToolError('diagnostics needs file (or "*" for the project checker)');
  if (args.file === '*') return runProjectCheckers(session, ctx);
  const abs = await session.resolveFile(args.file);
  const synced = await session.sync(abs);
  await synced.handle.client.save(synced.uri);
  const published = await session.diagnosticsOf(synced, session.settings.diagnosticsTimeoutMs);
  const display = session.format.display(abs);
  if (!published)
    throw new ToolError(
      `${synced.handle.spec.id} published no diagnostics for ${display} within ${session.settings.diagnosticsTimeoutMs} ms`,
    );
  ledger.note(abs, errorsAndWarnings(published.diagnostics));
  const shown = errorsAndWarnings(published.diagnostics).sort((a, b) => a.range.start.line - b.range.start.line);
  const hidden = published.diagnostics.length - shown.length;
  const extra = hidden > 0 ? ` (${hidden} hint/info not shown)` : '';
  if (shown.length === 0)
    return ok(header(synced, `${display}: no errors or warnings (${synced.handle.spec.id})${extra}`), {
      diagnostics: [],
    });
  const lines = shown.map((d) => session.format.diagnostic(abs, d));
  return ok(
    header(
      synced,
      `${display}: ${shown.length} error(s)/warning(s) (${synced.handle.spec.id})${extra}:\n${lines.join('\n')}`,
    ),
    { diagnostics: lines },
  );
}

async function reload(session: LspSession, args: LspArgs): Promise<ToolResult> {
  let root: string | undefined;
  if (args.file) {
    const abs = await session.resolveFile(args.file);
    const p = await session.placeOrFail(abs);
    root = p.root;
  }
  const stopped = await session.supervisor.reload(root);
  const which = root === undefined ? 'every root' : session.supervisor.describeRoot(root);
  if (stopped.length === 0) return ok(`no server was running for ${which}; the next call starts one`);
  return ok(
    `restarted on next use: ${stopped.map((h) => `${h.spec.id} (${session.supervisor.describeRoot(h.root)}, was pid ${h.client.pid})`).join(', ')}`,
  );
}

export async function runLspAction(
  session: LspSession,
  ledger: DiagnosticsLedger,
  args: LspArgs,
  ctx: ToolContext,
): Promise<ToolResult> {
  switch (args.action) {
    case 'status':
      return ok(formatStatus(session, await session.supervisor.status()));
    case 'reload':
      return reload(session, args);
    case 'diagnostics':
      return diagnostics(session, ledger, args, ctx);
    case 'symbols':
      return symbols(session, args, ctx);
    case 'definition':
    case 'type_definition':
    case 'implementation':
    case 'references':
    case 'hover':
    case 'code_actions':
      return navigate(session, args.action, args, ctx);
    default:
      throw new ToolError(`unknown action ${JSON.stringify((args as { action: unknown }).action)}`);
  }
}
