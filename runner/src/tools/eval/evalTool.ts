import type { ToolResult } from '../../../../protocol/src/tools';
import { ToolError, type ToolContext, type ToolDefinition } from '../../tool';
import { KernelStartError, type Language } from './kernel';
import type { KernelManager } from './kernelManager';
import { runCell, type CellRun } from './runCell';
import { checkDescription, evalSchema, type EvalArgs, type EvalSettings } from './schemas';
import { phase } from '../../util/phases';

const NAMES: Record<Language, string> = { python: 'Python', javascript: 'JavaScript' };

function explainReset(language: Language, cell: CellRun): string {
  const name = NAMES[language];
  if (cell.end.kind !== 'exited') return '';
  if (cell.killed) {
    return `The cell did not stop after an interrupt (${cell.stopReason}), so the ${name} interpreter was killed: it has been reset and its state (variables, imports, loaded data) is lost. The next cell starts a fresh interpreter.`;
  }
  const how = cell.end.signal ? `was killed by ${cell.end.signal}` : `exited with code ${cell.end.code}`;
  return `The ${name} interpreter ${how} during the cell, so it has been reset and its state (variables, imports, loaded data) is lost. The next cell starts a fresh interpreter.`;
}

/** Turns a finished cell into the call's result: output and rich items in order, then the outcome. */
export function cellResult(language: Language, cell: CellRun, executionCount: number, durationMs: number): ToolResult {
  const { end, error, stopReason, output } = cell;
  let closing: string | undefined;
  let isError = false;
  let status: string;
  if (end.kind === 'exited') {
    isError = true;
    status = 'reset';
    closing = explainReset(language, cell);
  } else {
    status = end.status;
    if (end.status !== 'ok') {
      isError = true;
      closing = error?.traceback ?? `${end.status}`;
      if (stopReason && end.status === 'interrupted')
        closing += `\nThe cell was interrupted because ${stopReason}. The interpreter keeps its state.`;
    }
  }
  const content = output.finish(closing);
  if (content.length === 0) content.push({ type: 'text', text: '(no output)' });
  return {
    content,
    ...(isError ? { isError } : {}),
    structured: {
      language,
      executionCount,
      status,
      durationMs: Math.round(durationMs),
      outputChars: output.totalChars,
      omittedChars: output.omittedChars,
      // Which items display() or the echoed last expression gave (the rest is printed text): a
      // client that renders a notebook tells results from output by it.
      displayed: output.displayed,
      // How many items the cell gave: what the gateway puts before them (a resume's notice) is
      // told apart by it.
      items: content.length,
      ...(error ? { error: { type: error.ename, message: error.evalue, traceback: error.traceback } } : {}),
      ...(status === 'reset' ? { interpreterReset: true } : {}),
    },
  };
}

/**
 * A cell may call eval through the bridge for a language whose interpreter is idle; one whose
 * interpreter is running a cell (its own, or the cell waiting on this one) would wait forever.
 */
function nestedEvalRefusal(kernels: KernelManager, name: string, args: unknown): string | undefined {
  if (name !== 'eval') return undefined;
  const language = ((args as { language?: unknown } | null)?.language ?? 'python') as Language;
  if (!kernels.busy(language)) return undefined;
  return `eval refused: the ${NAMES[language] ?? language} interpreter is busy running the cell that is waiting on this call; a cell cannot run another cell in the same interpreter`;
}

export function evalTool(kernels: KernelManager, settings: EvalSettings): ToolDefinition<EvalArgs> {
  return {
    name: 'eval',
    description:
      'Run a Python (default) or JavaScript cell in a persistent interpreter: variables, imports and loaded data survive across calls. ' +
      'The last expression is echoed; display(x) works; pandas DataFrames come back as tables and matplotlib figures as images. ' +
      '%pip, %cd, !cmd, %%bash, %%timeit, %time and %env work in Python (no network unless the run was granted egress to a list of hosts: then %pip and !npm install reach those through the gateway proxy, else only the workspace). ' +
      "tool(name, args) calls this run's tools from inside a cell (JavaScript: await tool(...)), under the same approvals. " +
      'A cell is interrupted after timeout_seconds (default 300) without output; waiting on tool() does not count.',
    tier: 'exec',
    inputSchema: evalSchema,
    parallelSafe: false,
    async run(args, ctx: ToolContext) {
      checkDescription(args.description);
      const language: Language = args.language ?? 'python';
      return kernels.exclusive(language, async () => {
        if (ctx.signal.aborted) throw new ToolError(`cancelled before the cell started: ${String(ctx.signal.reason)}`);
        let kernel;
        try {
          kernel = await kernels.kernel(language, !!args.reset);
        } catch (err) {
          if (err instanceof KernelStartError) throw new ToolError(err.message);
          throw err;
        }
        const started = Date.now();
        const cell = await phase('eval.cell', { 'eval.language': language }, () =>
          runCell(kernel, args.code, ctx, {
            budgetMs: (args.timeout_seconds ?? settings.timeoutSeconds) * 1000,
            graceMs: settings.interruptGraceSeconds * 1000,
            progressChars: settings.streamChars,
            output: {
              headChars: settings.outputHeadChars,
              tailChars: settings.outputTailChars,
              maxItems: settings.maxRichItems,
              imageChars: Math.ceil((settings.imageBytes * 4) / 3),
            },
            refuseBridged: (name, bridged) => nestedEvalRefusal(kernels, name, bridged),
          }),
        );
        return cellResult(language, cell, kernel.executionCount, Date.now() - started);
      });
    },
  };
}
