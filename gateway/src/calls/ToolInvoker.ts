import { ResponseError } from 'vscode-jsonrpc/node';
import type { Tier, ToolDescriptor, ToolResult } from '../../../protocol/src/tools';
import { logger } from '../log';
import { recordRunnerPhases } from '../observability/runnerPhases';
import type { ObservedCall } from '../observability/Telemetry';
import type { ReadyRun } from '../runs/RunRecord';
import { visible } from '../surfaces';
import { parseArguments } from '../validation';
import { checkApproval } from './ApprovalGate';
import type { CallPort } from './CallPort';
import { errorResult } from './results';

/** Raised when the caller's surface has no tool of that name (absent, or above its tier). */
export class ToolAbsentError extends Error {
  constructor(readonly tool: string) {
    super(`unknown tool: ${tool}`);
  }
}

/** Who a call is for; a bridged call inherits all of it from the call it came out of. */
export interface Caller {
  /** The highest tier the caller's surface may see. */
  cap: Tier;
  port: CallPort;
  /** Where the model's call is reported: its tier, approval, questions and bridged calls. */
  observed: ObservedCall;
}

const MAX_BRIDGE_DEPTH = 4;

/**
 * The one way into a run's tools, used by calls from the model and by calls bridged out of
 * an eval cell alike: visibility by tier, schema validation, approval, then the runner.
 */
export class ToolInvoker {
  /**
   * A model's call. A tool its surface does not show is ToolAbsentError (the call's status);
   * arguments that are not a JSON object are an is_error result, like any other bad argument.
   */
  async invoke(run: ReadyRun, tool: string, argumentsJson: string, caller: Caller): Promise<ToolResult> {
    const desc = shownTo(caller, run, tool);
    if (!desc) throw new ToolAbsentError(tool);
    const parsed = parseArguments(argumentsJson);
    caller.observed.resolved(desc.tier, parsed.ok ? parsed.value : {});
    if (!parsed.ok) return errorResult(parsed.error);
    return this.gated(run, desc, parsed.value, caller, 0);
  }

  /** A tool the caller may see, through the gate: validation and approval, then the runner. */
  private async gated(
    run: ReadyRun,
    desc: ToolDescriptor,
    args: Record<string, unknown>,
    caller: Caller,
    depth: number,
  ): Promise<ToolResult> {
    const { name: tool, tier } = desc;
    const { port, observed: obs } = caller;
    const validating = obs.phase('validate', { 'tether.tool': tool });
    const problems = run.validator.check(tool, args);
    validating?.end();
    if (problems.length > 0) {
      return {
        ...errorResult(`invalid arguments for ${tool}:\n- ${problems.join('\n- ')}`),
        structured: { invalidArguments: problems },
      };
    }
    const approving = tier === 'read' ? undefined : obs.phase('approval', { 'tether.tier': tier });
    const gate = await checkApproval(run.spec.approvals, tool, tier, args, port);
    approving?.set({ 'tether.approval': gate.decision });
    approving?.end();
    // An approval card has two options: Approve and Deny.
    if (gate.card) obs.question('permission', gate.card, 2);
    obs.approvalDecided(tier, gate.decision, depth === 0);
    if (!gate.allowed) return errorResult(gate.message);
    if (port.signal.aborted) return errorResult(`cancelled: ${String(port.signal.reason)}`);
    const running = obs.phase('runner', { 'tether.tool': tool });
    try {
      return await run.runner.callTool(
        tool,
        args,
        { maxTier: caller.cap },
        {
          progress: (text) => port.progress(text),
          ask: async (card) => {
            const outcome = await port.ask(card);
            // Without a human on the call no card was shown: nothing was asked to report.
            if (port.acceptsQuestions) obs.question('ask', outcome.kind, card.options.length);
            return outcome;
          },
          bridge: (name, bridgedArgs) => this.bridge(run, name, bridgedArgs, caller, depth + 1),
          phases: running ? (phases) => recordRunnerPhases(running, phases) : undefined,
        },
        port.signal,
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
          : caller.port.acceptsBridgeCalls
            ? 'client'
            : 'refused';
    const result = await caller.port.during(() => this.route(run, tool, args, caller, depth));
    caller.observed.bridgedCall(String(tool).slice(0, 128), target, result);
    return result;
  }

  /** Re-enters the gate as the same caller, or hands a tool the run does not own to the client. */
  private async route(run: ReadyRun, tool: string, args: unknown, caller: Caller, depth: number): Promise<ToolResult> {
    if (depth > MAX_BRIDGE_DEPTH)
      return errorResult(`bridged calls nest deeper than ${MAX_BRIDGE_DEPTH}; refusing ${tool}`);
    if (typeof tool !== 'string' || tool.length === 0) return errorResult('tool() needs a tool name');
    const objectArgs = args === undefined || args === null ? {} : args;
    if (typeof objectArgs !== 'object' || Array.isArray(objectArgs))
      return errorResult(`arguments of ${tool} must be an object`);
    const desc = shownTo(caller, run, tool);
    if (desc) {
      try {
        return await this.gated(run, desc, objectArgs as Record<string, unknown>, caller, depth);
      } catch (err) {
        logger.warn({ runId: run.runId, tool, err: (err as Error).message }, 'bridged call failed');
        return errorResult(`${tool} failed: ${(err as Error).message}`);
      }
    }
    // A tool of the run's above the caller's tier is never handed to the client (that would
    // bypass the cap), and is answered word for word as one nobody has: a capped cell cannot
    // tell them apart.
    if (run.tool(tool) || !caller.port.acceptsBridgeCalls) return errorResult(`unknown tool: ${tool}`);
    return caller.port.bridgeToClient(tool, JSON.stringify(objectArgs));
  }
}

/** The run's tool as the caller's surface shows it: above the caller's tier, it is no tool at all. */
function shownTo(caller: Caller, run: ReadyRun, tool: string): ToolDescriptor | undefined {
  const desc = run.tool(tool);
  return desc && visible(desc.tier, caller.cap) ? desc : undefined;
}
