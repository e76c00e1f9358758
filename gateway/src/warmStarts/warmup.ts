import type { ToolResult } from '../../../protocol/src/tools';
import type { ProcessService } from '../processes/ProcessService';
import type { ReadyRun } from '../runs/RunRecord';
import { DEFAULT_WARMUP_TIMEOUT_SECONDS, type Warmup } from '../templates/warmup';

/** What the warm-up did, for the snapshot's report. */
export interface WarmupReport {
  ms: number;
  /** Steps left out, each with why (a family the runs of this snapshot do not have). */
  skipped: string[];
}

export interface WarmupDeps {
  processes: Pick<ProcessService, 'start'>;
  /** The run, READY (resumed if it paused meanwhile). */
  ready(): Promise<ReadyRun>;
}

const POLL_MS = 250;

/**
 * Runs a template's warm-up in a run of the gateway's own: its commands, then the files opened
 * in their language servers until each server has answered and reports no work under way, then
 * the kernels' cells. Any step that fails fails the whole warm-up with the step and its reason:
 * a snapshot is only ever kept of a warm-up that ran whole.
 */
export async function runWarmup(
  tenant: string,
  runId: string,
  warmup: Warmup,
  deps: WarmupDeps,
): Promise<WarmupReport> {
  const t0 = performance.now();
  const timeoutMs = (warmup.timeoutSeconds ?? DEFAULT_WARMUP_TIMEOUT_SECONDS) * 1000;
  const deadline = Date.now() + timeoutMs;
  const left = () => {
    const ms = deadline - Date.now();
    if (ms <= 0) throw new Error(`the warm-up took longer than ${timeoutMs / 1000} s (timeoutSeconds)`);
    return ms;
  };
  const skipped: string[] = [];
  const features = (await deps.ready()).spec.features;

  for (const argv of warmup.commands ?? []) await command(tenant, runId, argv, left(), deps);

  if (warmup.open?.length && !features.lsp) skipped.push(`open ${warmup.open.join(', ')}: the runs have no lsp`);
  else
    for (const file of warmup.open ?? []) {
      const opened = await tool(deps, 'lsp', { action: 'diagnostics', file }, left());
      if (opened.isError) throw new Error(`open ${file}: ${textOf(opened)}`);
      // Until no server reports work under way: the project is loaded, its index built.
      while (/, busy: /.test(textOf(await tool(deps, 'lsp', { action: 'status' }, left()))))
        await new Promise((r) => setTimeout(r, POLL_MS));
    }

  if (warmup.eval?.length && !features.eval) skipped.push(`${warmup.eval.length} eval cell(s): the runs have no eval`);
  else
    for (const [i, cell] of (warmup.eval ?? []).entries()) {
      const ran = await tool(
        deps,
        'eval',
        {
          language: cell.language,
          code: cell.code,
          description: `the template warm-up's cell ${i + 1}, before its snapshot`,
        },
        left(),
      );
      if (ran.isError) throw new Error(`eval cell ${i + 1} (${cell.language}): ${textOf(ran).slice(0, 2000)}`);
    }
  return { ms: Math.round(performance.now() - t0), skipped };
}

async function command(tenant: string, runId: string, argv: string[], timeoutMs: number, deps: WarmupDeps) {
  const shown = argv.join(' ').slice(0, 200);
  let tail = '';
  const ended = new Promise<{ exitCode: number; error?: string; signal?: string }>((resolve) => {
    void deps.processes
      .start(tenant, runId, { cmd: argv[0], args: argv.slice(1), timeoutMs }, (e) => {
        if (e.type === 'output') tail = (tail + e.data.toString('utf8')).slice(-2000);
        else if (e.type === 'end') resolve(e.end);
      })
      .catch((err: Error) => resolve({ exitCode: -1, error: err.message }));
  });
  const end = await ended;
  if (end.exitCode !== 0) {
    const how = end.error ?? (end.signal ? `ended by ${end.signal}` : `exit code ${end.exitCode}`);
    throw new Error(`command ${shown}: ${how}${tail.trim() ? `; its output ended: ${tail.trim().slice(-600)}` : ''}`);
  }
}

async function tool(deps: WarmupDeps, name: string, args: Record<string, unknown>, timeoutMs: number) {
  const ready = await deps.ready();
  const signal = AbortSignal.timeout(timeoutMs);
  const refused = async (): Promise<ToolResult> => ({
    content: [{ type: 'text', text: 'a template warm-up answers no question and bridges no call' }],
    isError: true,
  });
  return ready.runner.callTool(
    name,
    { ...args },
    { maxTier: 'exec' },
    {
      progress: () => undefined,
      ask: async () => ({ kind: 'unavailable', reason: 'a template warm-up has no human to ask' }),
      bridge: refused,
    },
    signal,
    undefined,
  );
}

function textOf(r: ToolResult): string {
  return r.content
    .map((c) => ('text' in c ? c.text : ''))
    .join('\n')
    .trim();
}
