import type { ToolDescriptor, ToolResult } from '../../protocol/src/tools';
import { ToolError, fail, text, type ToolContext, type ToolDefinition } from './tool';

/**
 * The run's tools. A family registers a tool only when the resource behind it is wired for
 * the run, so an unwired tool does not exist at all (not merely fails).
 */
export class ToolRegistry {
  private readonly tools = new Map<string, ToolDefinition>();

  /** `workspaceRoot`: filesystem messages show paths relative to it, not the host's layout. */
  constructor(private readonly workspaceRoot?: string) {}

  private scrub(message: string): string {
    const root = this.workspaceRoot;
    return root ? message.split(`${root}/`).join('').split(`'${root}'`).join("'.'") : message;
  }

  register(tool: ToolDefinition): void {
    if (this.tools.has(tool.name)) throw new Error(`tool ${tool.name} registered twice`);
    this.tools.set(tool.name, tool);
  }

  has(name: string): boolean {
    return this.tools.has(name);
  }

  list(): ToolDescriptor[] {
    return [...this.tools.values()].map(({ name, description, tier, inputSchema, parallelSafe }) => ({
      name,
      description,
      tier,
      inputSchema,
      parallelSafe,
    }));
  }

  async call(name: string, args: unknown, ctx: ToolContext): Promise<ToolResult> {
    const tool = this.tools.get(name);
    if (!tool) return fail(`unknown tool: ${name}`);
    try {
      // A cancelled call ends within a short grace even if the tool does not watch its signal:
      // the client is never left waiting; a tool that does watch reports its own ending.
      const cancel = cancellationOf(ctx);
      const result = await Promise.race([tool.run(args, ctx), aborted(cancel)]);
      if (cancel.aborted && !result.isError) {
        // Whatever the tool made of the abort, the caller asked to stop: say so first.
        return {
          ...result,
          isError: true,
          content: [text(`cancelled: ${String(cancel.reason ?? 'the call was cancelled')}`), ...result.content],
        };
      }
      return result;
    } catch (err) {
      if (err instanceof ToolError) return fail(err.message, err.structured);
      const cancel = cancellationOf(ctx);
      if (cancel.aborted) return fail(`cancelled: ${String(cancel.reason ?? 'the call was cancelled')}`);
      const e = err as NodeJS.ErrnoException;
      // Filesystem errors are the model's to act on (missing file, is a directory...).
      if (typeof e?.code === 'string' && typeof e.message === 'string') return fail(this.scrub(e.message));
      throw err;
    }
  }
}

/** How long a cancelled tool may take to report its own ending before the call is cut. */
const CANCEL_GRACE_MS = 2000;

type Cancellation = NonNullable<ToolContext['cancellation']>;

/** The call's cancellation as the registry watches it: the context's own, else its signal's. */
function cancellationOf(ctx: ToolContext): Cancellation {
  if (ctx.cancellation) return ctx.cancellation;
  const signal = ctx.signal;
  return {
    get aborted() {
      return signal.aborted;
    },
    get reason() {
      return signal.reason;
    },
    onAbort: (fn) => {
      if (signal.aborted) fn();
      else signal.addEventListener('abort', fn, { once: true });
    },
  };
}

function aborted(cancel: Cancellation): Promise<never> {
  return new Promise((_, reject) => {
    cancel.onAbort(() => {
      const timer = setTimeout(
        () => reject(new ToolError(`cancelled: ${String(cancel.reason ?? 'the call was cancelled')}`)),
        CANCEL_GRACE_MS,
      );
      timer.unref();
    });
  });
}
