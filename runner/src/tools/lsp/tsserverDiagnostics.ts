import { ExecuteCommandRequest, type Diagnostic } from 'vscode-languageserver-protocol';
import type { LspClient } from './client';

interface TsDiagnostic {
  start: { line: number; offset: number };
  end: { line: number; offset: number };
  text: string;
  code?: number;
  category: 'error' | 'warning' | 'suggestion' | 'message';
}

const SEVERITY: Record<TsDiagnostic['category'], 1 | 2 | 3 | 4> = { error: 1, warning: 2, message: 3, suggestion: 4 };

/**
 * Diagnostics of one file asked of tsserver directly (through typescript-language-server's
 * `typescript.tsserverRequest` command). Its pushed diagnostics carry no document version and
 * are skipped when a change follows quickly, so waiting for a push cannot tell "clean" from
 * "not yet"; asking is exact and takes tens of milliseconds.
 */
export async function pullTsserverDiagnostics(client: LspClient, absFile: string): Promise<Diagnostic[]> {
  const out: Diagnostic[] = [];
  for (const command of ['syntacticDiagnosticsSync', 'semanticDiagnosticsSync']) {
    const r: { body?: TsDiagnostic[] } | null = await client.request(ExecuteCommandRequest.type, {
      command: 'typescript.tsserverRequest',
      arguments: [command, { file: absFile, includeLinePosition: false }],
    });
    for (const d of r?.body ?? []) {
      out.push({
        range: {
          start: { line: d.start.line - 1, character: d.start.offset - 1 },
          end: { line: d.end.line - 1, character: d.end.offset - 1 },
        },
        severity: SEVERITY[d.category] ?? 1,
        code: d.code,
        source: 'typescript',
        message: d.text,
      });
    }
  }
  return out;
}
