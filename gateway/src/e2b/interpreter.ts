import { create } from '@bufbuild/protobuf';
import { CallToolStartSchema, type CallToolStart, type ToolResult } from '@tether/contract';
import { invalid, notFound } from '../errors';
import { readJson, sendError, sendJson, type Req, type Res } from './http';

/** One tool call answered once, as InvokeTool answers it: the same gate, quotas and audit. */
export type InvokeTool = (tenant: string, start: CallToolStart) => Promise<ToolResult>;

const LANGUAGES: Record<string, 'python' | 'javascript'> = {
  '': 'python',
  python: 'python',
  python3: 'python',
  javascript: 'javascript',
  js: 'javascript',
  typescript: 'javascript',
  ts: 'javascript',
  deno: 'javascript',
};
const MAX_BODY = 8 * 1024 * 1024;
const DEFAULT_CONTEXTS = { python: 'default-python', javascript: 'default-javascript' } as const;

interface EvalStructured {
  executionCount?: number;
  status?: string;
  displayed?: number[];
  items?: number;
  error?: { type: string; message: string; traceback?: string };
}

function tableText(columns: string[], rows: { cells: string[] }[], omitted: number): string {
  const lines = [columns.join('\t'), ...rows.map((r) => r.cells.join('\t'))];
  if (omitted) lines.push(`… ${omitted} more rows`);
  return lines.join('\n');
}

function tableHtml(columns: string[], rows: { cells: string[] }[]): string {
  const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  const head = `<tr>${columns.map((c) => `<th>${esc(c)}</th>`).join('')}</tr>`;
  const body = rows.map((r) => `<tr>${r.cells.map((c) => `<td>${esc(c)}</td>`).join('')}</tr>`).join('');
  return `<table><thead>${head}</thead><tbody>${body}</tbody></table>`;
}

/**
 * An eval result as the lines of E2B's `/execute` stream: printed text as stdout, what the cell
 * displayed (the echoed last expression last, the main result) as results, the exception as
 * the error, then the execution count. tether's kernels give printed text as one stream, so
 * stderr arrives as stdout.
 */
export function executionLines(result: ToolResult): Record<string, unknown>[] {
  const s: EvalStructured = result.structuredJson ? JSON.parse(result.structuredJson) : {};
  // Items before the cell's own (the notice the first call after a resume carries) are tether's
  // words to a model, not the cell's output.
  const offset = s.items === undefined ? 0 : Math.max(0, result.content.length - s.items);
  const displayed = new Set((s.displayed ?? []).map((i) => i + offset));
  const lastDisplayed = Math.max(-1, ...displayed);
  const timestamp = new Date().toISOString();
  const lines: Record<string, unknown>[] = [];
  result.content.forEach((c, i) => {
    if (i < offset) return;
    const item = c.item;
    if (!displayed.has(i)) {
      if (item.case !== 'text') return;
      let text = item.value;
      const tb = s.error?.traceback;
      if (tb && text.endsWith(tb)) text = text.slice(0, -tb.length);
      if (text && text !== '(no output)') lines.push({ type: 'stdout', text, timestamp });
      return;
    }
    const main = i === lastDisplayed && i === result.content.length - 1;
    const base = { type: 'result', is_main_result: main };
    switch (item.case) {
      case 'text':
        lines.push({ ...base, text: item.value });
        break;
      case 'image': {
        const mime = item.value.mime.replace(/^image\//, '');
        const key = mime === 'svg+xml' ? 'svg' : mime;
        const data =
          key === 'svg'
            ? Buffer.from(item.value.data).toString('utf8')
            : Buffer.from(item.value.data).toString('base64');
        lines.push({ ...base, [key]: data, text: `<Figure (${item.value.mime})>` });
        break;
      }
      case 'table': {
        const { columns, rows, omittedRows } = item.value;
        lines.push({ ...base, text: tableText(columns, rows, omittedRows), html: tableHtml(columns, rows) });
        break;
      }
      case 'json':
        lines.push({ ...base, json: JSON.parse(item.value), text: item.value });
        break;
    }
  });
  if (s.error)
    lines.push({ type: 'error', name: s.error.type, value: s.error.message, traceback: s.error.traceback ?? '' });
  else if (result.isError) {
    const text = result.content.map((c) => (c.item.case === 'text' ? c.item.value : '')).join('\n');
    lines.push({ type: 'error', name: 'ExecutionError', value: text, traceback: text });
  }
  if (s.executionCount !== undefined) lines.push({ type: 'number_of_executions', execution_count: s.executionCount });
  return lines;
}

/**
 * The code interpreter's API (`/execute`, `/contexts`) onto tether's eval kernels: each run has
 * one Python and one JavaScript interpreter, so a context is a language's interpreter; a
 * context's restart resets it.
 */
export class E2bInterpreter {
  constructor(private readonly invoke: InvokeTool) {}

  matches(path: string): boolean {
    return path === '/execute' || path === '/contexts' || path.startsWith('/contexts/');
  }

  async handle(tenant: string, runId: string, req: Req, res: Res): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://e2b');
    try {
      if (url.pathname === '/execute' && req.method === 'POST') return await this.execute(tenant, runId, req, res);
      if (url.pathname === '/contexts' && req.method === 'POST') {
        const body = await readJson(req, MAX_BODY);
        const language = languageOf(body.language);
        return sendJson(res, 200, { id: DEFAULT_CONTEXTS[language], language, cwd: '/home/user' });
      }
      if (url.pathname === '/contexts' && req.method === 'GET')
        return sendJson(
          res,
          200,
          (['python', 'javascript'] as const).map((l) => ({ id: DEFAULT_CONTEXTS[l], language: l, cwd: '/home/user' })),
        );
      const m = /^\/contexts\/([^/]+)(\/restart)?$/.exec(url.pathname);
      if (m && req.method === 'POST' && m[2]) {
        await this.run(tenant, runId, contextLanguage(m[1]), '', true);
        return sendJson(res, 204);
      }
      if (m && req.method === 'DELETE') {
        contextLanguage(m[1]);
        return sendJson(res, 204);
      }
      throw notFound(`${req.method} ${url.pathname} is not part of the code interpreter's API`);
    } catch (err) {
      sendError(res, err);
    }
  }

  private run(tenant: string, runId: string, language: string, code: string, reset = false): Promise<ToolResult> {
    return this.invoke(
      tenant,
      create(CallToolStartSchema, {
        runId,
        callId: `e2b-${Date.now()}`,
        tool: 'eval',
        argumentsJson: JSON.stringify({
          code,
          language,
          description: 'code run through the E2B interpreter API',
          reset,
        }),
      }),
    );
  }

  private async execute(tenant: string, runId: string, req: Req, res: Res): Promise<void> {
    const body = await readJson(req, MAX_BODY);
    if (typeof body.code !== 'string') throw invalid('code must be a string');
    const language =
      typeof body.context_id === 'string' && body.context_id
        ? contextLanguage(body.context_id)
        : languageOf(body.language);
    const env = body.env_vars && typeof body.env_vars === 'object' ? (body.env_vars as Record<string, unknown>) : {};
    // Per-execution variables, as E2B sets them: in the interpreter's environment for this cell.
    const code = Object.keys(env).length ? withEnv(language, env, body.code) : body.code;
    const result = await this.run(tenant, runId, language, code);
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.end(
      executionLines(result)
        .map((line) => `${JSON.stringify(line)}\n`)
        .join(''),
    );
  }
}

function languageOf(v: unknown): 'python' | 'javascript' {
  const l = LANGUAGES[typeof v === 'string' ? v.toLowerCase() : ''];
  if (!l) throw invalid(`language ${String(v)} is not served: tether's interpreters are python and javascript`);
  return l;
}

function contextLanguage(id: string): 'python' | 'javascript' {
  for (const [l, cid] of Object.entries(DEFAULT_CONTEXTS)) if (cid === id) return l as 'python' | 'javascript';
  throw notFound(`context ${id} not found (each sandbox has ${Object.values(DEFAULT_CONTEXTS).join(' and ')})`);
}

function withEnv(language: 'python' | 'javascript', env: Record<string, unknown>, code: string): string {
  const vars = JSON.stringify(Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)])));
  return language === 'python'
    ? `import os as __tether_os\n__tether_os.environ.update(${vars})\ndel __tether_os\n${code}`
    : `Object.assign(process.env, ${vars});\n${code}`;
}
