import type { ToolResult } from '../../../../protocol/src/tools';
import { ToolError, ok, type ToolContext, type ToolDefinition } from '../../tool';
import {
  formatAdapters,
  formatBreakpoints,
  formatFrames,
  formatOutcome,
  formatVariables,
  outcomeStructured,
} from './format';
import type { Outcome, DebugSession } from './session';
import { phase } from '../../util/phases';
import { DEBUG_DESCRIPTION, debugSchema, REQUIRED_BY_OP, type DebugArgs } from './schemas';
import { describeStart, formatSeconds, type DebugSupervisor } from './supervisor';

const STEP_REQUEST = { continue: 'continue', step_over: 'next', step_in: 'stepIn', step_out: 'stepOut' } as const;

/** The `debug` tool: one op per call, all of them serialized on the conversation's supervisor. */
export function debugTool(sup: DebugSupervisor): ToolDefinition<DebugArgs> {
  return {
    name: 'debug',
    description: DEBUG_DESCRIPTION,
    tier: 'exec',
    inputSchema: debugSchema,
    parallelSafe: false,
    run: (args, ctx) =>
      sup.serialize(() => phase(`debug.${args.op}`, { 'debug.op': args.op }, () => runOp(sup, args, ctx))),
  };
}

function need<K extends keyof DebugArgs>(args: DebugArgs, key: K): NonNullable<DebugArgs[K]> {
  const v = args[key];
  if (v === undefined || v === null) throw new ToolError(`op "${args.op}" needs the argument "${key}"`);
  return v as NonNullable<DebugArgs[K]>;
}

function outcomeResult(
  sup: DebugSupervisor,
  session: DebugSession,
  outcome: Outcome,
  boundMs: number,
  prefix = '',
): ToolResult {
  // A program that ended took its session with it; the exit code read while closing is the final one.
  const final: Outcome =
    outcome.kind === 'ended' ? { ...outcome, exitCode: session.exitCode ?? outcome.exitCode } : outcome;
  const waited = final.kind === 'running' ? final.waitedMs || boundMs : 0;
  return ok(prefix + formatOutcome(final, sup, sup.output.tail(2000), waited), {
    session: session.id,
    adapter: session.adapter,
    ...outcomeStructured(final, sup),
  });
}

async function runOp(sup: DebugSupervisor, args: DebugArgs, ctx: ToolContext): Promise<ToolResult> {
  for (const key of REQUIRED_BY_OP[args.op] ?? []) need(args, key);
  const boundMs = (args.wait_seconds ?? sup.settings.waitSeconds) * 1000;
  switch (args.op) {
    case 'adapters': {
      const rows = await sup.adapters();
      return ok(formatAdapters(rows, sup, sup.adapterProblems), {
        problems: sup.adapterProblems,
        adapters: rows.map((r) => ({
          id: r.id,
          command: r.command,
          declaredIn: r.source,
          markers: r.markers,
          available: r.available,
          root: r.root ? sup.displayPath(r.root.dir) : undefined,
          binary: r.binary?.command,
          interpreter: r.binary?.interpreter,
          binaryMissing: r.binaryMissing,
          markerMissing: r.markerMissing,
        })),
      });
    }

    case 'status':
      return status(sup);

    case 'breakpoints': {
      const b = await sup.setBreakpoints(need(args, 'file'), need(args, 'lines'));
      return ok(formatBreakpoints(b), { file: b.file, lines: b.lines, pending: !b.results, results: b.results });
    }

    case 'launch': {
      ctx.progress(`starting the debugger for ${args.program}`);
      const { session, outcome, availability } = await sup.launch(
        need(args, 'program'),
        args.args ?? [],
        args.adapter,
        boundMs,
        ctx.signal,
      );
      return outcomeResult(
        sup,
        session,
        outcome,
        boundMs,
        `session ${session.id} (${availability.id}) launched ${describeStart(session.start, sup)}\n`,
      );
    }

    case 'attach': {
      const { session, outcome, availability } = await sup.attach(
        need(args, 'port'),
        args.adapter,
        boundMs,
        ctx.signal,
      );
      return outcomeResult(
        sup,
        session,
        outcome,
        boundMs,
        `session ${session.id} (${availability.id}) attached to port ${args.port}\n`,
      );
    }

    case 'continue':
    case 'step_over':
    case 'step_in':
    case 'step_out': {
      const session = await sup.require();
      const outcome = await session.resume(STEP_REQUEST[args.op], args.thread_id, boundMs, ctx.signal);
      await sup.afterOutcome(session, outcome);
      return outcomeResult(sup, session, outcome, boundMs);
    }

    case 'pause': {
      const session = await sup.require();
      const outcome = await session.pause(args.thread_id, boundMs, ctx.signal);
      await sup.afterOutcome(session, outcome);
      return outcomeResult(sup, session, outcome, boundMs);
    }

    case 'threads': {
      const session = await sup.require();
      const threads = await session.threads();
      return ok(
        `${threads.length} thread${threads.length === 1 ? '' : 's'}:\n${threads.map((t) => `  ${t.id}  ${t.name}`).join('\n')}`,
        { threads },
      );
    }

    case 'stack': {
      const session = await sup.require();
      const { threadId, frames, totalFrames } = await session.stack(args.thread_id);
      return ok(formatFrames(threadId, frames, totalFrames, sup), {
        threadId,
        totalFrames,
        frames: frames.map((f) => ({ ...f, file: f.file ? sup.displayPath(f.file) : undefined })),
      });
    }

    case 'scopes': {
      const session = await sup.require();
      const scopes = await session.scopes(need(args, 'frame_id'));
      return ok(
        `frame ${args.frame_id}: ${scopes.map((s) => `${s.name} (reference ${s.reference})`).join(', ') || 'no scopes'}`,
        { frameId: args.frame_id, scopes },
      );
    }

    case 'variables': {
      const session = await sup.require();
      const { variables, total } = await session.variables(need(args, 'reference'));
      return ok(formatVariables(args.reference!, variables, total), { reference: args.reference, total, variables });
    }

    case 'evaluate': {
      const session = await sup.require();
      const r = await session.evaluate(need(args, 'expression'), args.frame_id);
      return ok(
        `${args.expression} = ${r.value}${r.type ? ` (${r.type})` : ''}${r.reference ? `  (reference ${r.reference})` : ''}`,
        r,
      );
    }

    case 'output': {
      const { droppedChars, totalChars } = sup.output.read();
      const text = sup.output.render();
      const head = droppedChars ? `(the first ${droppedChars} of ${totalChars} characters were dropped)\n` : '';
      return ok(text || droppedChars ? head + text : '(the program has printed nothing)', {
        stdout: sup.output.stream('stdout'),
        stderr: sup.output.stream('stderr'),
        droppedChars,
        totalChars,
      });
    }

    case 'terminate': {
      await sup.reapEnded();
      const ended = await sup.terminate();
      if (!ended) {
        const note = sup.takeEndedNote();
        return ok(`no debug session is running${note ? ` (${note})` : ''}; nothing to terminate`, {
          terminated: false,
        });
      }
      return ok(
        `session ${ended.id} terminated and its adapter stopped${ended.start.kind === 'attach' ? ' (the attached program was left running)' : ''}`,
        { terminated: true, session: ended.id },
      );
    }
  }
}

async function status(sup: DebugSupervisor): Promise<ToolResult> {
  await sup.reapEnded();
  const session = sup.live;
  // With a session, each line also says whether the adapter verified it.
  const bps = [...sup.breakpoints].map(([file, lines]) => {
    const known = session?.breakpointStatus.get(file);
    return {
      file: sup.displayPath(file),
      lines,
      verified: known ? lines.map((l) => known.find((r) => r.requestedLine === l)?.verified ?? false) : undefined,
    };
  });
  const lineText = (b: (typeof bps)[number]) =>
    b.lines.map((l, i) => (b.verified && !b.verified[i] ? `${l} (not verified)` : String(l))).join(',');
  const bpText = bps.length
    ? `\nbreakpoints: ${bps.map((b) => `${b.file}:${lineText(b)}`).join('; ')}`
    : '\nno breakpoints set';
  if (!session) {
    const note = sup.takeEndedNote();
    return ok(`no debug session is running${note ? ` (${note})` : ''}${bpText}`, {
      session: null,
      breakpoints: bps,
      lastEnded: note,
    });
  }
  const outcome = await session.current();
  const ageS = Math.round((Date.now() - session.startedAt) / 1000);
  const left = Math.max(0, sup.settings.ttlSeconds - ageS);
  const where =
    outcome.kind === 'stopped'
      ? formatOutcome(outcome, sup, '', 0)
      : outcome.kind === 'running'
        ? 'running'
        : `ended: ${outcome.reason}`;
  return ok(
    `session ${session.id} (${session.adapter}, ${describeStart(session.start, sup)}), ${where}\nage ${ageS}s, ends in ${formatSeconds(left)} (TTL)${bpText}`,
    {
      session: session.id,
      adapter: session.adapter,
      adapterPid: session.adapterPid,
      ageSeconds: ageS,
      ttlLeftSeconds: left,
      breakpoints: bps,
      ...outcomeStructured(outcome, sup),
    },
  );
}
