import type { Node } from 'web-tree-sitter';
import type { RunContext } from '../../run';
import { ToolError, type ToolDefinition } from '../../tool';
import type { Captures } from './matcher';
import { DEFAULT_MAX_RESULTS, MAX_MAX_RESULTS, grepSchema, type AstSettings, type GrepArgs } from './schemas';
import { describeStats, searchWorkspace } from './search';
import type { TreeCache } from './treeCache';

const MAX_MATCH_CHARS = 400;

export interface FoundMatch {
  file: string;
  start_line: number;
  end_line: number;
  text: string;
  captures: Record<string, string | string[]>;
}

export function cut(text: string, max = MAX_MATCH_CHARS): string {
  return text.length <= max ? text : `${text.slice(0, max)}… (${text.length - max} more characters)`;
}

function plainCaptures(caps: Captures): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, node] of caps.single) out[name] = cut(node.text, 200);
  for (const [name, nodes] of caps.multi) out[name] = nodes.filter((n: Node) => n.isNamed && !n.isExtra).map((n) => cut(n.text, 200));
  return out;
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

export function grepTool(run: RunContext, cache: TreeCache, settings: AstSettings): ToolDefinition<GrepArgs> {
  return {
    name: 'ast_grep',
    description:
      'Structural code search: finds code by its syntax tree, not its text. $NAME matches one node, $$$NAME a run of siblings, $_ anything; a metavariable repeated in the pattern must match the same code each time. Whitespace, comments and optional punctuation are ignored.',
    tier: 'read',
    inputSchema: grepSchema,
    parallelSafe: true,
    async run(args, ctx) {
      const max = checkMaxResults(args.max_results);
      const found: FoundMatch[] = [];
      let total = 0;
      const files = new Set<string>();
      const stats = await searchWorkspace(
        run.workspace,
        cache,
        args,
        settings,
        (f) => {
          files.add(f.rel);
          for (const m of f.matches) {
            total++;
            if (found.length >= max) continue;
            const text = f.source.slice(m.start, m.end);
            const startLine = m.node.startPosition.row + 1;
            found.push({
              file: f.rel,
              start_line: startLine,
              end_line: startLine + (text.match(/\n/g)?.length ?? 0),
              text: cut(text),
              captures: plainCaptures(m.captures),
            });
          }
        },
        ctx.signal,
      );
      const head =
        total === 0
          ? `no matches (${describeStats(stats)})`
          : `${total} match(es) in ${files.size} file(s)${total > found.length ? `, showing the first ${found.length}` : ''} (${describeStats(stats)})`;
      return {
        content: [{ type: 'text', text: [head, ...found.map(render)].join('\n') }],
        structured: { total, shown: found.length, files: files.size, matches: found, stats },
      };
    },
  };
}
