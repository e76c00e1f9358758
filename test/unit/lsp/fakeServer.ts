/**
 * A scripted language server for unit tests of the supervisor's logic (readiness bound, crash
 * and restart, idle stop, a server that never publishes). Behaviour comes from the environment:
 *   FAKE_PROGRESS_MS  after `initialized`, hold a work-done progress open this long
 *   FAKE_PUBLISH      "never" to send no diagnostics; otherwise one error per line containing "BAD"
 * A rename replaces the first four characters of a.fake and b.fake with the new name.
 */
import { createMessageConnection, StreamMessageReader, StreamMessageWriter } from 'vscode-jsonrpc/node';
import {
  DiagnosticSeverity,
  DidChangeTextDocumentNotification,
  DidOpenTextDocumentNotification,
  ExitNotification,
  HoverRequest,
  InitializedNotification,
  InitializeRequest,
  PublishDiagnosticsNotification,
  RenameRequest,
  ShutdownRequest,
  TextDocumentSyncKind,
  WorkDoneProgress,
  WorkDoneProgressCreateRequest,
  type Diagnostic,
  type Hover,
  type InitializeResult,
} from 'vscode-languageserver-protocol';

const c = createMessageConnection(new StreamMessageReader(process.stdin), new StreamMessageWriter(process.stdout));
const progressMs = Number(process.env.FAKE_PROGRESS_MS ?? 0);

c.onRequest(InitializeRequest.type, (): InitializeResult => ({ capabilities: { textDocumentSync: TextDocumentSyncKind.Full, hoverProvider: true, renameProvider: true } }));
// Renames the first word of a.fake and b.fake beside the requesting document.
c.onRequest(RenameRequest.type, (p) => {
  const dir = p.textDocument.uri.slice(0, p.textDocument.uri.lastIndexOf('/') + 1);
  const edit = [{ range: { start: { line: 0, character: 0 }, end: { line: 0, character: 4 } }, newText: p.newName }];
  return { changes: { [`${dir}a.fake`]: edit, [`${dir}b.fake`]: edit } };
});
c.onNotification(InitializedNotification.type, async () => {
  if (progressMs <= 0) return;
  await c.sendRequest(WorkDoneProgressCreateRequest.type, { token: 'index' });
  await c.sendProgress(WorkDoneProgress.type, 'index', { kind: 'begin', title: 'indexing' });
  setTimeout(() => void c.sendProgress(WorkDoneProgress.type, 'index', { kind: 'end' }), progressMs);
});
const publish = (uri: string, version: number, text: string) => {
  if (process.env.FAKE_PUBLISH === 'never') return;
  const diagnostics = text.split('\n').flatMap((l, i): Diagnostic[] => (l.includes('BAD') ? [{ range: { start: { line: i, character: 0 }, end: { line: i, character: 3 } }, severity: DiagnosticSeverity.Error, code: 'bad', message: 'BAD is not allowed' }] : []));
  setTimeout(() => void c.sendNotification(PublishDiagnosticsNotification.type, { uri, version, diagnostics }), 20);
};
c.onNotification(DidOpenTextDocumentNotification.type, (p) => publish(p.textDocument.uri, p.textDocument.version, p.textDocument.text));
c.onNotification(DidChangeTextDocumentNotification.type, (p) => publish(p.textDocument.uri, p.textDocument.version, p.contentChanges[0].text));
c.onRequest(HoverRequest.type, (): Hover => ({ contents: { kind: 'markdown', value: `pid ${process.pid}` } }));
c.onRequest(ShutdownRequest.type, () => undefined);
c.onNotification(ExitNotification.type, () => process.exit(0));
c.listen();
