import { DefinitionRequest, ReferencesRequest } from 'vscode-languageserver-protocol';
import type { ProbeParams, ProbeResult } from '../../../../protocol/src/lsp';
import { ToolError, type ToolContext } from '../../tool';
import { locate, navigate } from './actions';
import type { LspSession } from './session';

/**
 * The `lsp probe` run command: sends one request straight to the file's warm server (or runs
 * the whole lsp tool action, `via: 'tool'`) `count` times and returns each in ms, measured in
 * the runner. It exists so a benchmark can
 * compare a tool call against the bare server in the same run; it is not a tool and no model sees it.
 */
export async function probe(session: LspSession, req: ProbeParams): Promise<ProbeResult> {
  if (req.method !== DefinitionRequest.method && req.method !== ReferencesRequest.method)
    throw new ToolError(`probe sends ${DefinitionRequest.method} or ${ReferencesRequest.method}, not ${req.method}`);
  const signal = new AbortController().signal;
  const { synced, position } = await locate(session, req, 'probe');
  const textDocument = { uri: synced.uri };
  const { client } = synced.handle;
  const action = req.method === ReferencesRequest.method ? 'references' : 'definition';
  const ctx: ToolContext = {
    callId: 'probe',
    surface: { maxTier: 'read' },
    signal,
    progress: () => undefined,
    ask: async () => ({ kind: 'unavailable', reason: 'a probe has no human' }),
    callTool: async () => {
      throw new ToolError('a probe calls no tools');
    },
  };
  const send =
    req.via === 'tool'
      ? () => navigate(session, action, { action, file: req.file, line: req.line, symbol: req.symbol }, ctx)
      : req.method === ReferencesRequest.method
        ? () =>
            client.request(
              ReferencesRequest.type,
              { textDocument, position, context: { includeDeclaration: true } },
              signal,
            )
        : () => client.request(DefinitionRequest.type, { textDocument, position }, signal);
  const samplesMs: number[] = [];
  for (let i = 0; i < Math.min(Math.max(1, req.count), 1000); i++) {
    const t0 = process.hrtime.bigint();
    await send();
    samplesMs.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return { server: synced.handle.spec.id, samplesMs };
}
