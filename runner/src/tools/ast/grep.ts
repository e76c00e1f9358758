import type { RunContext } from '../../run';
import { ToolError, type ToolDefinition } from '../../tool';
import type { SearchEngine } from './pool';
import { DEFAULT_MAX_RESULTS, MAX_MAX_RESULTS, grepSchema, type AstSettings, type GrepArgs } from './schemas';
import { describeStats, searchWorkspace } from './search';
import { count } from './words';

export interface FoundMatch {
  file: string;
  start_line: number;
  end_line: number;
  text: string;
  captures: Record<string, string | string[]>;
}

export function checkMaxResults(v: unknown): number {
  if (v === undefined) return DEFAULT_MAX_RESULTS;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > MAX_MAX_RESULTS) {
    throw new ToolError(`max_results must be an integer from 1 to ${MAX_MAX_RESULTS} (got ${JSON.stringify(v)})`);
  }
  return v;
}

function render(m: FoundMatch): string {
  const lines = m.start_line === m.end_line ? `${m.start_line}` : `${m.start_line}-${m.end_line}`;
  const caps = Object.entries(m.captures)
    .map(([k, v]) => `$${Array.isArray(v) ? '$$' : ''}${k} = ${Array.isArray(v) ? `[${v.join(', ')}]` : v}`)
    .join('; ');
  const body = m.text.includes('\n') ? `\n    ${m.text.split('\n').join('\n    ')}` : ` ${m.text}`;
  return `${m.file}:${lines}:${body}${caps ? `\n    captures: ${caps}` : ''}`;
}

export function grepTool(run: RunContext, engine: SearchEngine, settings: AstSettings): ToolDefinition<GrepArgs> {
  return {
    name: 'ast_grep',
    description:
      'Structural code search: finds code by its syntax tree, not its text. $NAME matches one node, $$$NAME a run of siblings, $_ anything; a metavariable repeated in the pattern must match the same code each time. Whitespace, comments and optional punctuation are ignored.',
    tier: 'read',
    inputSchema: grepSchema,
    parallelSafe: true,
    async run(args, ctx) {
      const max = checkMaxResults(args.max_results);
      const { files, stats } = await searchWorkspace(
        run.workspace,
        engine,
        { ...args, limit: max },
        settings.maxFileBytes,
        ctx.signal,
      );
      const total = files.reduce((n, f) => n + f.total, 0);
      const found: FoundMatch[] = files
        .flatMap((f) =>
          f.matches.map((m) => ({
            file: f.rel,
            start_line: m.startLine,
            end_line: m.endLine,
            text: m.text,
            captures: m.captures,
          })),
        )
        .slice(0, max);
      const head =
        total === 0
          ? `no matches (${describeStats(stats)})`
          : `${count(total, 'match', 'matches')} in ${count(files.length, 'file')}${total > found.length ? `, showing the first ${found.length}` : ''} (${describeStats(stats)})`;
      return {
        content: [{ type: 'text', text: [head, ...found.map(render)].join('\n') }],
        structured: { total, shown: found.length, files: files.length, matches: found, stats },
      };
    },
  };
}
