/**
 * A scripted language server for unit tests of the supervisor's logic (readiness bound, crash
 * and restart, idle stop, a server that never publishes). Behaviour comes from the environment:
 *   FAKE_PROGRESS_MS  after `initialized`, hold a work-done progress open this long
 *   FAKE_PUBLISH      "never" to send no diagnostics; otherwise one error per line containing "BAD"
 */
import { createMessageConnection, StreamMessageReader, StreamMessageWriter } from 'vscode-jsonrpc/node';

const c = createMessageConnection(new StreamMessageReader(process.stdin), new StreamMessageWriter(process.stdout));
const progressMs = Number(process.env.FAKE_PROGRESS_MS ?? 0);

c.onRequest('initialize', () => ({ capabilities: { textDocumentSync: 1, hoverProvider: true } }));
c.onNotification('initialized', async () => {
  if (progressMs <= 0) return;
  await c.sendRequest('window/workDoneProgress/create', { token: 'index' });
  await c.sendNotification('$/progress', { token: 'index', value: { kind: 'begin', title: 'indexing' } });
  setTimeout(() => void c.sendNotification('$/progress', { token: 'index', value: { kind: 'end' } }), progressMs);
});
const publish = (uri: string, version: number, text: string) => {
  if (process.env.FAKE_PUBLISH === 'never') return;
  const diagnostics = text.split('\n').flatMap((l, i) => (l.includes('BAD') ? [{ range: { start: { line: i, character: 0 }, end: { line: i, character: 3 } }, severity: 1, code: 'bad', message: 'BAD is not allowed' }] : []));
  setTimeout(() => void c.sendNotification('textDocument/publishDiagnostics', { uri, version, diagnostics }), 20);
};
c.onNotification('textDocument/didOpen', (p: { textDocument: { uri: string; version: number; text: string } }) => publish(p.textDocument.uri, p.textDocument.version, p.textDocument.text));
c.onNotification('textDocument/didChange', (p: { textDocument: { uri: string; version: number }; contentChanges: { text: string }[] }) =>
  publish(p.textDocument.uri, p.textDocument.version, p.contentChanges[0].text),
);
c.onRequest('textDocument/hover', () => ({ contents: { kind: 'markdown', value: `pid ${process.pid}` } }));
c.onRequest('shutdown', () => null);
c.onNotification('exit', () => process.exit(0));
c.listen();
