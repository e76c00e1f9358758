import type { ContentItem } from '../../../../protocol/src/tools';
import type { ToolContext } from '../../tool';
import { CellOutput, type OutputLimits } from './cellOutput';
import { InactivityTimer } from './inactivity';
import type { CellEnd, Kernel } from './kernel';

export interface CellError {
  ename: string;
  evalue: string;
  traceback: string;
}

export interface CellRun {
  end: CellEnd;
  output: CellOutput;
  error?: CellError;
  /** Why the runner stopped the cell (inactivity, cancel), when it did. */
  stopReason?: string;
  /** The cell ignored the interrupt and its interpreter was killed. */
  killed: boolean;
}

export interface CellOptions {
  budgetMs: number;
  graceMs: number;
  /** Characters of printed text streamed as progress. */
  progressChars: number;
  output: OutputLimits;
  /** A reason to answer a bridged call at once with an error instead of making it. */
  refuseBridged?: (name: string, args: unknown) => string | undefined;
}

/**
 * Runs one cell on a kernel for one tool call: output streams out as progress and into the
 * result, bridged tool() calls go to ctx.callTool, and silence, cancel or deadline interrupt the
 * cell — then kill the interpreter if the interrupt is not enough.
 */
export async function runCell(kernel: Kernel, code: string, ctx: ToolContext, opts: CellOptions): Promise<CellRun> {
  const output = new CellOutput(opts.output);
  const run: Omit<CellRun, 'end'> = { output, killed: false };
  let progressLeft = opts.progressChars;
  const progress = (text: string) => {
    if (progressLeft <= 0 || !text) return;
    const part = text.slice(0, progressLeft);
    progressLeft -= part.length;
    ctx.progress(part);
  };
  let grace: NodeJS.Timeout | undefined;
  const stop = (reason: string) => {
    if (run.stopReason) return;
    run.stopReason = reason;
    kernel.interrupt();
    grace = setTimeout(() => {
      run.killed = true;
      kernel.kill();
    }, opts.graceMs);
  };
  const seconds = Math.round((opts.budgetMs / 1000) * 10) / 10;
  const timer = new InactivityTimer(opts.budgetMs, () =>
    stop(`the cell produced no output for ${seconds} s (its inactivity budget; pass timeout_seconds for more)`),
  );
  const onAbort = () => stop(`the call was cancelled (${String(ctx.signal.reason ?? 'cancelled')})`);
  ctx.signal.addEventListener('abort', onAbort, { once: true });
  try {
    const end = await kernel.execute(code, {
      message(msg) {
        timer.touch();
        switch (msg.t) {
          case 'stream':
            if (msg.omitted) output.addOmitted(msg.omitted);
            output.addText(msg.text);
            progress(msg.text);
            break;
          case 'display':
            output.addItem(msg.item as ContentItem);
            break;
          case 'error':
            run.error = { ename: msg.ename, evalue: msg.evalue, traceback: msg.traceback };
            break;
        }
      },
      raw(_name, text) {
        timer.touch();
        output.addText(text);
        progress(text);
      },
      async tool(name, args) {
        const refusal = opts.refuseBridged?.(name, args);
        if (refusal) return { content: [{ type: 'text', text: refusal }], isError: true };
        timer.pause();
        try {
          return await ctx.callTool(name, args);
        } finally {
          timer.resume();
        }
      },
    });
    return { ...run, end };
  } finally {
    timer.stop();
    clearTimeout(grace);
    ctx.signal.removeEventListener('abort', onAbort);
  }
}
