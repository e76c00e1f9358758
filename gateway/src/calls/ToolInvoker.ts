import type { Tier, ToolResult } from '../../../protocol/src/tools';
import type { ReadyRun } from '../runs/RunManager';
import { visible } from '../surfaces';
import { checkApproval } from './ApprovalGate';
import type { CallStream } from './CallStream';
import { errorResult } from './results';
import { logger } from '../log';
import { ResponseError } from 'vscode-jsonrpc/node';

/** Raised when the caller's surface has no tool of that name (absent, or above its tier). */
export class ToolAbsentError extends Error {
  constructor(readonly tool: string) {
    super(`unknown tool: ${tool}`);
  }
}

export interface Caller {
  /** The highest tier the caller's surface may see. */
  cap: Tier;
  stream: CallStream;
}

const MAX_BRIDGE_DEPTH = 4;

/**
 * The one way into a run's tools, used by calls from the model and by calls bridged out of
 * an eval cell alike: visibility by tier, schema validation, approval, then the runner.
 */
export class ToolInvoker {
  async invoke(run: ReadyRun, tool: string, args: Record<string, unknown>, caller: Caller, depth = 0): Promise<ToolResult> {
    const desc = run.tool(tool);
    if (!desc || !visible(desc.tier, caller.cap)) throw new ToolAbsentError(tool);
    const problems = run.validator.check(tool, args);
    if (problems.length > 0) {
      return { ...errorResult(`invalid arguments for ${tool}:\n- ${problems.join('\n- ')}`), structured: { invalidArguments: problems } };
    }
    const gate = await checkApproval(run.spec.approvals, tool, desc.tier, args, caller.stream);
    if (!gate.allowed) return errorResult(gate.message);
    if (caller.stream.signal.aborted) return errorResult(`cancelled: ${String(caller.stream.signal.reason)}`);
    try {
      return await run.runner.callTool(tool, args, { maxTier: caller.cap }, {
        progress: (text) => caller.stream.progress(text),
        ask: (card) => caller.stream.ask(card),
        bridge: (name, bridgedArgs) => this.bridge(run, name, bridgedArgs, caller, depth + 1),
      }, caller.stream.signal);
    } catch (err) {
      // A bug inside one tool is that call's failure, reported to the model; the run goes on.
      if (err instanceof ResponseError) {
        logger.error({ runId: run.runId, tool, err: err.message }, 'tool failed inside the runner');
        return errorResult(`${tool} failed inside the runner: ${err.message}`);
      }
      throw err;
    }
  }

  /** A tool() call from inside a running tool: re-enters the registry as the same caller. */
  private async bridge(run: ReadyRun, tool: string, args: unknown, caller: Caller, depth: number): Promise<ToolResult> {
    if (depth > MAX_BRIDGE_DEPTH) return errorResult(`bridged calls nest deeper than ${MAX_BRIDGE_DEPTH}; refusing ${tool}`);
    if (typeof tool !== 'string' || tool.length === 0) return errorResult('tool() needs a tool name');
    const objectArgs = args === undefined || args === null ? {} : args;
    if (typeof objectArgs !== 'object' || Array.isArray(objectArgs)) return errorResult(`arguments of ${tool} must be an object`);
    const owned = run.tool(tool);
    if (owned) {
      try {
        return await this.invoke(run, tool, objectArgs as Record<string, unknown>, caller, depth);
      } catch (err) {
        // Visible to nobody on this surface: the same answer as a tool that does not exist,
        // and never handed to the client, which would bypass the tier cap.
        if (err instanceof ToolAbsentError) return errorResult(`unknown tool: ${tool}`);
        logger.warn({ runId: run.runId, tool, err: (err as Error).message }, 'bridged call failed');
        return errorResult(`${tool} failed: ${(err as Error).message}`);
      }
    }
    if (!caller.stream.acceptsBridgeCalls) {
      // Word for word the answer for a tool above the caller's tier: a capped cell cannot tell them apart.
      return errorResult(`unknown tool: ${tool}`);
    }
    return caller.stream.bridgeToClient(tool, JSON.stringify(objectArgs));
  }
}
