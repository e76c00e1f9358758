import type { Tier, ToolResult } from '../../../protocol/src/tools';
import type { ReadyRun } from '../runs/RunRecord';
import { visible } from '../surfaces';
import { checkApproval } from './ApprovalGate';
import type { CallStream } from './CallStream';
import { errorResult } from './results';
import { logger } from '../log';
import { recordRunnerPhases } from '../observability/runnerPhases';
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
  async invoke(
    run: ReadyRun,
    tool: string,
    args: Record<string, unknown>,
    caller: Caller,
    depth = 0,
  ): Promise<ToolResult> {
    const desc = run.tool(tool);
    if (!desc || !visible(desc.tier, caller.cap)) throw new ToolAbsentError(tool);
    const obs = caller.stream.observed;
    const validating = obs.phase('validate', { 'tether.tool': tool });
    const problems = run.validator.check(tool, args);
    validating?.end();
    if (problems.length > 0) {
      return {
        ...errorResult(`invalid arguments for ${tool}:\n- ${problems.join('\n- ')}`),
        structured: { invalidArguments: problems },
      };
    }
    const approving = desc.tier === 'read' ? undefined : obs.phase('approval', { 'tether.tier': desc.tier });
    const gate = await checkApproval(run.spec.approvals, tool, desc.tier, args, caller.stream);
    approving?.set({ 'tether.approval': gate.decision });
    approving?.end();
    obs.approvalDecided(desc.tier, gate.decision, depth === 0);
    if (!gate.allowed) return errorResult(gate.message);
    if (caller.stream.signal.aborted) return errorResult(`cancelled: ${String(caller.stream.signal.reason)}`);
    const running = obs.phase('runner', { 'tether.tool': tool });
    try {
      return await run.runner.callTool(
        tool,
        args,
        { maxTier: caller.cap },
        {
          progress: (text) => caller.stream.progress(text),
          ask: (card) => caller.stream.ask(card),
          bridge: (name, bridgedArgs) => this.bridge(run, name, bridgedArgs, caller, depth + 1),
          phases: running ? (phases) => recordRunnerPhases(running, phases) : undefined,
        },
        caller.stream.signal,
        running?.traceparent(),
      );
    } catch (err) {
      running?.fail((err as Error).message);
      // A bug inside one tool is that call's failure, reported to the model; the run goes on.
      if (err instanceof ResponseError) {
        logger.error({ runId: run.runId, tool, err: err.message }, 'tool failed inside the runner');
        return errorResult(`${tool} failed inside the runner: ${err.message}`);
      }
      throw err;
    } finally {
      running?.end();
    }
  }

  /** A tool() call from inside a running tool, reported with where it ran. */
  private async bridge(run: ReadyRun, tool: string, args: unknown, caller: Caller, depth: number): Promise<ToolResult> {
    const target =
      depth > MAX_BRIDGE_DEPTH
        ? 'refused'
        : typeof tool === 'string' && run.tool(tool)
          ? 'gateway'
          : caller.stream.acceptsBridgeCalls
            ? 'client'
            : 'refused';
    const result = await caller.stream.during(() => this.route(run, tool, args, caller, depth));
    caller.stream.observed.bridgedCall(String(tool).slice(0, 128), target, result);
    return result;
  }

  /** Re-enters the registry as the same caller, or hands a tool the run does not own to the client. */
  private async route(run: ReadyRun, tool: string, args: unknown, caller: Caller, depth: number): Promise<ToolResult> {
    if (depth > MAX_BRIDGE_DEPTH)
      return errorResult(`bridged calls nest deeper than ${MAX_BRIDGE_DEPTH}; refusing ${tool}`);
    if (typeof tool !== 'string' || tool.length === 0) return errorResult('tool() needs a tool name');
    const objectArgs = args === undefined || args === null ? {} : args;
    if (typeof objectArgs !== 'object' || Array.isArray(objectArgs))
      return errorResult(`arguments of ${tool} must be an object`);
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
