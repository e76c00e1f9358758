/**
 * A scripted language server for unit tests of the supervisor's logic (readiness bound, crash
 * and restart, idle stop, a server that never publishes). Behaviour comes from the environment:
 *   FAKE_PROGRESS_MS  after `initialized`, hold a work-done progress open this long
 *   FAKE_PUBLISH      "never" to send no diagnostics; otherwise one error per line containing "BAD"
 * A rename replaces the first four characters of a.fake and b.fake with the new name.
 */
import { createMessageConnection, StreamMessageReader, StreamMessageWriter } from 'vscode-jsonrpc/node';

const c = createMessageConnection(new StreamMessageReader(process.stdin), new StreamMessageWriter(process.stdout));
const progressMs = Number(process.env.FAKE_PROGRESS_MS ?? 0);

c.onRequest('initialize', () => ({ capabilities: { textDocumentSync: 1, hoverProvider: true, renameProvider: true } }));
// Renames the first word of a.fake and b.fake beside the requesting document.
c.onRequest('textDocument/rename', (p: { textDocument: { uri: string }; newName: string }) => {
  const dir = p.textDocument.uri.slice(0, p.textDocument.uri.lastIndexOf('/') + 1);
  const edit = [{ range: { start: { line: 0, character: 0 }, end: { line: 0, character: 4 } }, newText: p.newName }];
  return { changes: { [`${dir}a.fake`]: edit, [`${dir}b.fake`]: edit } };
});
c.onNotification('initialized', async () => {
  if (progressMs <= 0) return;
  await c.sendRequest('window/workDoneProgress/create', { token: 'index' });
  await c.sendNotification('$/progress', { token: 'index', value: { kind: 'begin', title: 'indexing' } });
  setTimeout(() => void c.sendNotification('$/progress', { token: 'index', value: { kind: 'end' } }), progressMs);
});
const publish = (uri: string, version: number, text: string) => {
  if (process.env.FAKE_PUBLISH === 'never') return;
  const diagnostics = text.split('\n').flatMap((l, i) =>
    l.includes('BAD')
      ? [
          {
            range: { start: { line: i, character: 0 }, end: { line: i, character: 3 } },
            severity: 1,
            code: 'bad',
            message: 'BAD is not allowed',
          },
        ]
      : [],
  );
  setTimeout(() => void c.sendNotification('textDocument/publishDiagnostics', { uri, version, diagnostics }), 20);
};
c.onNotification('textDocument/didOpen', (p: { textDocument: { uri: string; version: number; text: string } }) =>
  publish(p.textDocument.uri, p.textDocument.version, p.textDocument.text),
);
c.onNotification(
  'textDocument/didChange',
  (p: { textDocument: { uri: string; version: number }; contentChanges: { text: string }[] }) =>
    publish(p.textDocument.uri, p.textDocument.version, p.contentChanges[0].text),
);
c.onRequest('textDocument/hover', () => ({ contents: { kind: 'markdown', value: `pid ${process.pid}` } }));
c.onRequest('shutdown', () => null);
c.onNotification('exit', () => process.exit(0));
c.listen();
