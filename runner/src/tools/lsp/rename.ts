import { promises as fs } from 'node:fs';
import {
  PrepareRenameRequest,
  RenameRequest,
  type TextDocumentEdit,
  type TextEdit,
  type WorkspaceEdit,
} from 'vscode-languageserver-protocol';
import { commitChanges, type FileChange } from '../../fileTransaction';
import type { ToolResult } from '../../../../protocol/src/tools';
import type { RunContext } from '../../run';
import { ToolError, type ToolContext } from '../../tool';
import { locate } from './actions';
import { fromUri, toUri } from './format';
import { checkIdentifier } from './identifiers';
import type { LspRenameArgs } from './schemas';
import type { LspSession } from './session';

/** UTF-16 offset of an LSP position in a text (clamped to the line's end, as servers expect). */
function offsetAt(text: string, lineStarts: number[], pos: { line: number; character: number }): number {
  if (pos.line >= lineStarts.length) return text.length;
  const start = lineStarts[pos.line];
  const end = pos.line + 1 < lineStarts.length ? lineStarts[pos.line + 1] - 1 : text.length;
  return Math.min(start + pos.character, end);
}

/** Applies non-overlapping text edits to a text (last first, so offsets stay valid). */
export function applyTextEdits(text: string, edits: TextEdit[]): string {
  const starts = [0];
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) === 10) starts.push(i + 1);
  const spans = edits
    .map((e) => ({
      from: offsetAt(text, starts, e.range.start),
      to: offsetAt(text, starts, e.range.end),
      text: e.newText,
    }))
    .sort((a, b) => b.from - a.from || b.to - a.to);
  let out = text;
  let lastFrom = Number.POSITIVE_INFINITY;
  for (const s of spans) {
    if (s.to > lastFrom) throw new ToolError('the server returned overlapping edits; nothing was written');
    out = out.slice(0, s.from) + s.text + out.slice(s.to);
    lastFrom = s.from;
  }
  return out;
}

/** A WorkspaceEdit as per-file edit lists (with the document version the server meant, if any). */
function editsByFile(edit: WorkspaceEdit): Map<string, { edits: TextEdit[]; version?: number | null }> {
  const out = new Map<string, { edits: TextEdit[]; version?: number | null }>();
  if (edit.documentChanges) {
    for (const dc of edit.documentChanges) {
      if (!('textDocument' in dc))
        throw new ToolError(
          `the server's rename also ${dc.kind}s files; tether applies text renames only and wrote nothing`,
        );
      const d = dc as TextDocumentEdit;
      const entry = out.get(d.textDocument.uri) ?? { edits: [], version: d.textDocument.version };
      entry.edits.push(...(d.edits as TextEdit[]));
      out.set(d.textDocument.uri, entry);
    }
  } else if (edit.changes) {
    for (const [uri, edits] of Object.entries(edit.changes))
      out.set(uri, { edits: [...(out.get(uri)?.edits ?? []), ...edits] });
  }
  return out;
}

/** `lsp_rename`: the server's WorkspaceEdit applied to every file or to none. */
export async function renameSymbol(
  run: RunContext,
  session: LspSession,
  args: LspRenameArgs,
  ctx: ToolContext,
): Promise<ToolResult> {
  const { synced, position } = await locate(session, args, 'lsp_rename');
  const { handle } = synced;
  checkIdentifier(args.new_name, (await session.placeOrFail(synced.abs)).languageId);
  const where = `${session.format.display(synced.abs)}:${args.line} ${JSON.stringify(args.symbol)}`;
  const textDocument = { uri: synced.uri };

  const provider = handle.client.capabilities.renameProvider;
  if (!provider) throw new ToolError(`${handle.spec.id} does not support rename`);
  if (typeof provider === 'object' && provider.prepareProvider) {
    const prep = await session
      .request(handle, PrepareRenameRequest.type, { textDocument, position }, ctx.signal)
      .catch((err: Error) => {
        throw new ToolError(`cannot rename at ${where}: ${err.message}`);
      });
    if (prep === null) throw new ToolError(`there is no renameable symbol at ${where}`);
  }
  const edit = await session
    .request(handle, RenameRequest.type, { textDocument, position, newName: args.new_name }, ctx.signal)
    .catch((err: Error) => {
      throw new ToolError(`cannot rename at ${where}: ${err.message}`);
    });
  const files = edit ? editsByFile(edit) : new Map();
  if (files.size === 0) throw new ToolError(`the server found nothing to rename at ${where}`);

  const changes: FileChange[] = [];
  const counts: { file: string; edits: number }[] = [];
  for (const [uri, { edits, version }] of files) {
    const abs = fromUri(uri);
    // Confines every path the server names to the workspace: one outside refuses the whole rename.
    const confined = await run.workspace.resolve(abs).catch(() => {
      throw new ToolError(`the rename would change ${abs}, outside the workspace; nothing was written`);
    });
    // The content the server computed against: the synced document if open, else the file on disk.
    const open = handle.client.openDocument(uri);
    if (open && typeof version === 'number' && version !== open.version) {
      throw new ToolError(
        `the server answered for version ${version} of ${session.format.display(abs)} but has version ${open.version}; nothing was written — retry`,
      );
    }
    const expected = open ? open.text : await fs.readFile(confined, 'utf8');
    changes.push({ path: confined, expected, next: applyTextEdits(expected, edits) });
    counts.push({ file: session.format.display(confined), edits: edits.length });
  }
  await commitChanges(changes, (p) => session.format.display(p));

  // Keep the server's view equal to the disk, then let write observers (diagnostics) look.
  for (const c of changes) {
    const p = await session.supervisor.place(c.path);
    if (p.ok && p.root === handle.root && p.spec.id === handle.spec.id) {
      await handle.client.sync(toUri(c.path), p.languageId, c.next ?? '');
      await handle.client.save(toUri(c.path));
    }
  }
  const extra = await run.afterWrite(
    changes.map((c) => c.path),
    ctx,
  );
  const total = counts.reduce((n, c) => n + c.edits, 0);
  counts.sort((a, b) => (a.file < b.file ? -1 : 1));
  const lines = counts.map((c) => `${c.file}: ${c.edits} edit(s)`);
  return {
    content: [
      {
        type: 'text',
        text: `renamed ${JSON.stringify(args.symbol)} to ${JSON.stringify(args.new_name)}: ${total} edit(s) in ${counts.length} file(s)\n${lines.join('\n')}`,
      },
      ...extra,
    ],
    structured: { files: counts, edits: total },
  };
}
