import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { status, type ClientDuplexStream } from '@grpc/grpc-js';
import {
  AnswerSchema,
  BridgeResultSchema,
  CallToolInputSchema,
  QuestionKind,
  type SurfaceSchema,
  type ToolResultSchema,
  type BridgeCall,
  type CallToolInput,
  type CallToolOutput,
  type Question,
  type ToolResult,
} from '@tether/contract';
import { TetherError } from './errors';
import { resultStructured, resultText } from './results';

export type AnswerInit = Omit<MessageInitShape<typeof AnswerSchema>, 'questionId' | '$typeName'>;
export type ToolResultInit = MessageInitShape<typeof ToolResultSchema>;
export type SurfaceInit = MessageInitShape<typeof SurfaceSchema>;
type Awaitable<T> = T | Promise<T>;

/** What an approval handler decides: a boolean, or a decision with the human's words. */
export type ApprovalDecision = boolean | { approved: boolean; reason?: string };

/** What a bridged-call handler returns: plain text, or a whole result (set `isError` for a failure). */
export type BridgeReply = string | ToolResultInit;

export interface CallOptions {
  /** Who is asking: PLAN mode and read-only subagents see only read-tier tools. */
  surface?: SurfaceInit;
  /** Your id for this call, echoed in the gateway's logs. */
  callId?: string;
  /**
   * Answers question cards (`ask_user`, and PERMISSION cards when there is no onApproval).
   * Giving it declares that a human is connected; without it (and without onApproval) the
   * gateway refuses questions and PROMPT approvals at once. A card whose answer was rejected
   * comes again with `rejectedReason` set. A handler that throws ends the call with its error.
   */
  onQuestion?: (question: Question) => Awaitable<AnswerInit>;
  /** Decides PERMISSION cards (approval prompts). ASK cards without onQuestion are skipped. */
  onApproval?: (question: Question) => Awaitable<ApprovalDecision>;
  /**
   * Runs a tool the gateway does not own, called from an eval cell (`tool("name", args)`).
   * Giving it declares `accepts_bridge_calls`. A handler that throws answers with an error
   * result carrying its message, which the cell sees as a ToolError.
   */
  onBridgeCall?: (call: BridgeCall, args: unknown) => Awaitable<BridgeReply>;
  onProgress?: (text: string) => void;
  /**
   * Cancels the call: the gateway stops the tool and still ends the call with a result (an
   * error naming the reason). Already aborted: the call is not sent and rejects with CANCELLED.
   */
  signal?: AbortSignal;
  /** The call's deadline; past it the call rejects with DEADLINE_EXCEEDED. */
  deadlineMs?: number;
  /** After a cancel, how long to wait for the gateway's result before hanging up (default 10 s). */
  cancelGraceMs?: number;
  /** A W3C trace context (`00-<trace>-<span>-01`): the gateway's spans of this call join that trace. */
  traceparent?: string;
}

export interface CallOutcome {
  result: ToolResult;
  /** The result's text (see resultText). */
  text: string;
  /** The result's structured data, parsed, when it has any. */
  structured: unknown;
  isError: boolean;
  progress: string[];
  /** Every card shown on this call, in order (a re-shown card appears again). */
  questions: Question[];
  bridgeCalls: BridgeCall[];
}

/** The reason text of an aborted signal. */
export function abortReason(signal: AbortSignal): string {
  const r: unknown = signal.reason;
  if (r instanceof Error) return r.name === 'AbortError' ? 'cancelled' : r.message;
  return r === undefined ? 'cancelled' : String(r);
}

function bridgeResult(reply: BridgeReply): ToolResultInit {
  return typeof reply === 'string' ? { content: [{ item: { case: 'text', value: reply } }] } : reply;
}

function approvalAnswer(d: ApprovalDecision): AnswerInit {
  if (typeof d === 'boolean') return { approved: d };
  return { approved: d.approved, freeText: d.reason ?? '' };
}

/**
 * What carries one call: its own CallTool stream, or its id on the shared Calls stream.
 * `onEnd` fires once: without an error after the result, or with the call's failure.
 */
export interface CallChannel {
  send(msg: CallToolInput): void;
  onOutput(fn: (out: CallToolOutput) => void): void;
  onEnd(fn: (err?: TetherError) => void): void;
  /** The call is settled here: no more of it is wanted (the call was answered or given up). */
  close(): void;
  /** Whether messages can still be sent. */
  readonly open: boolean;
}

/**
 * Drives one call to its single result: sends `start`, answers cards and bridged calls with
 * the handlers, turns an abort into `Cancel`, and settles once.
 */
export function driveCall(
  call: CallChannel,
  start: MessageInitShape<typeof CallToolInputSchema>['msg'],
  opts: CallOptions,
): Promise<CallOutcome> {
  const progress: string[] = [];
  const questions: Question[] = [];
  const bridgeCalls: BridgeCall[] = [];
  let result: ToolResult | undefined;
  let settled = false;
  let graceTimer: NodeJS.Timeout | undefined;

  return new Promise<CallOutcome>((resolve, reject) => {
    const finish = (err?: unknown) => {
      if (settled) return;
      settled = true;
      clearTimeout(graceTimer);
      opts.signal?.removeEventListener('abort', onAbort);
      call.close();
      if (err !== undefined) {
        reject(err);
      } else if (result) {
        resolve({
          result,
          text: resultText(result),
          structured: resultStructured(result),
          isError: result.isError,
          progress,
          questions,
          bridgeCalls,
        });
      } else {
        reject(new TetherError(status.INTERNAL, 'the call ended without a result'));
      }
    };
    const send = (msg: MessageInitShape<typeof CallToolInputSchema>['msg']) => {
      if (!settled && call.open) call.send(create(CallToolInputSchema, { msg }));
    };
    const onAbort = () => {
      send({ case: 'cancel', value: { reason: abortReason(opts.signal!) } });
      // The gateway answers a cancel with a result; one that does not is hung up on.
      graceTimer = setTimeout(
        () =>
          finish(
            new TetherError(
              status.CANCELLED,
              `no result within ${opts.cancelGraceMs ?? 10_000} ms of the cancel: ${abortReason(opts.signal!)}`,
            ),
          ),
        opts.cancelGraceMs ?? 10_000,
      );
    };

    const answer = async (q: Question) => {
      let a: AnswerInit;
      if (q.kind === QuestionKind.PERMISSION && opts.onApproval) a = approvalAnswer(await opts.onApproval(q));
      else if (opts.onQuestion) a = await opts.onQuestion(q);
      else a = { skipped: true };
      send({ case: 'answer', value: create(AnswerSchema, { ...a, questionId: q.id }) });
    };
    const bridge = async (b: BridgeCall) => {
      let reply: ToolResultInit;
      try {
        let args: unknown;
        try {
          args = JSON.parse(b.argumentsJson || '{}');
        } catch {
          args = b.argumentsJson;
        }
        reply = bridgeResult(await opts.onBridgeCall!(b, args));
      } catch (err) {
        reply = {
          isError: true,
          content: [{ item: { case: 'text', value: err instanceof Error ? err.message : String(err) } }],
        };
      }
      send({ case: 'bridgeResult', value: create(BridgeResultSchema, { bridgeId: b.bridgeId, result: reply }) });
    };

    call.onOutput((out: CallToolOutput) => {
      switch (out.msg.case) {
        case 'progress':
          progress.push(out.msg.value.text);
          opts.onProgress?.(out.msg.value.text);
          break;
        case 'question':
          questions.push(out.msg.value);
          answer(out.msg.value).catch((err) => finish(err));
          break;
        case 'bridgeCall':
          bridgeCalls.push(out.msg.value);
          if (opts.onBridgeCall) void bridge(out.msg.value);
          break;
        case 'result':
          result = out.msg.value;
          break;
      }
    });
    call.onEnd(finish);

    opts.signal?.addEventListener('abort', onAbort, { once: true });
    send(start);
  });
}

/**
 * A CallTool stream as the channel of its one call. Closing it before the stream ended hangs
 * up (the gateway stops the call); after the result it only ends our side.
 */
export function streamChannel(call: ClientDuplexStream<CallToolInput, CallToolOutput>): CallChannel {
  let ended = false;
  return {
    send: (msg) => call.write(msg),
    onOutput: (fn) => call.on('data', fn),
    onEnd: (fn) => {
      call.on('error', (err) => {
        ended = true;
        fn(TetherError.from(err));
      });
      call.on('end', () => {
        ended = true;
        fn();
      });
    },
    close: () => {
      if (!ended) call.cancel();
      else if (!call.writableEnded) call.end();
    },
    get open() {
      return !call.writableEnded && !call.destroyed;
    },
  };
}
