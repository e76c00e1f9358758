/**
 * The lsp family's command outside tool calls: `probe`, which times requests sent straight to
 * a file's warm language server so a benchmark can compare a tool call against the bare
 * server in the same run. No model sees it.
 */
import { FamilyCommand } from './run';

export interface ProbeParams {
  file: string;
  line: number;
  symbol: string;
  occurrence?: number;
  method: 'textDocument/definition' | 'textDocument/references';
  count: number;
  /**
   * `server` (default): the bare request to the server. `tool`: the whole lsp tool action in
   * the runner (locate, sync, request, format), without the call's transport.
   */
  via?: 'server' | 'tool';
}

export interface ProbeResult {
  server: string;
  samplesMs: number[];
}

/** gateway → runner: sends `method` to the file's server `count` times; each round trip in ms. */
export namespace ProbeCommand {
  export const type = new FamilyCommand<ProbeParams, ProbeResult>('lsp', 'probe');
}
