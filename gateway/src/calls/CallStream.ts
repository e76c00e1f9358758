import { randomUUID } from 'node:crypto';
import { create } from '@bufbuild/protobuf';
import {
  CallToolOutputSchema,
  QuestionKind,
  QuestionSchema,
  QuestionOptionSchema,
  type Answer,
  type CallToolInput,
  type CallToolOutput,
  type CallToolStart,
  type ToolResult as PbToolResult,
} from '@tether/contract';
import type { QuestionCard, QuestionOutcome } from '../../../protocol/src/calls';
import type { ToolResult } from '../../../protocol/src/tools';
import { Telemetry, type ObservedCall } from '../observability/Telemetry';
import type { CallSink } from './CallSink';
import { outcomeOf, rejectReason } from './QuestionCards';
import { fromProtoResult, toProtoResult } from './results';

export type PermissionOutcome = { kind: 'approved' } | { kind: 'denied'; reason: string };

interface OpenCard {
  card: QuestionCard;
  kind: QuestionKind;
  send: (rejected?: string) => void;
  settle: (answer: Answer | { timeout: true } | { closed: string }) => void;
}

/**
 * One call as the tool sees it, whatever carries it (see CallSink): progress out, question
 * cards and bridged calls out and their answers back, and an abort signal for cancel,
 * disconnect and deadline.
 */
export class CallStream {
  private readonly abort = new AbortController();
  private readonly cards = new Map<string, OpenCard>();
  private readonly bridges = new Map<string, (r: ToolResult) => void>();
  private ended = false;
  /** Bridged calls of this call still under way (see `during`). */
  private bridging = 0;
  private deadlineTimer?: NodeJS.Timeout;

  constructor(
    private readonly sink: CallSink,
    readonly start: CallToolStart,
    private readonly targetSpace: string,
    private readonly questionTimeoutSeconds: number,
    /** Where this call's questions, approvals and bridged calls are reported. */
    readonly observed: ObservedCall = Telemetry.off.call('', start, undefined),
  ) {
    if (sink.deadline !== undefined && Number.isFinite(sink.deadline)) {
      this.deadlineTimer = setTimeout(
        () => this.cancel('the deadline passed'),
        Math.max(0, sink.deadline - Date.now()),
      );
    }
    // A sink reports its client gone after the result as well (grpc-js reports every CallTool
    // stream's close as 'cancelled'; a Calls stream says so when the call ends). Once the result
    // went out, only work still under way (a bridged call the tool left running) has anything
    // to stop; skipping the abort otherwise spares every call an abort event.
    sink.onGone((reason) => {
      if (!this.ended || this.bridging > 0 || this.cards.size > 0) this.cancel(reason);
    });
  }

  get signal(): AbortSignal {
    return this.abort.signal;
  }

  get acceptsQuestions(): boolean {
    return this.start.acceptsQuestions;
  }

  get acceptsBridgeCalls(): boolean {
    return this.start.acceptsBridgeCalls;
  }

  /** Routes a later input message (answer, bridge result, cancel). */
  receive(msg: CallToolInput): void {
    switch (msg.msg.case) {
      case 'answer': {
        const open = this.cards.get(msg.msg.value.questionId);
        if (!open) return;
        const answer = msg.msg.value;
        if (open.kind === QuestionKind.ASK) {
          const why = rejectReason(open.card, answer);
          if (why) {
            open.send(why);
            return;
          }
        }
        open.settle(answer);
        return;
      }
      case 'bridgeResult': {
        const r = this.bridges.get(msg.msg.value.bridgeId);
        if (r)
          r(
            msg.msg.value.result
              ? fromProtoResult(msg.msg.value.result)
              : { content: [{ type: 'text', text: 'the client returned no result' }], isError: true },
          );
        return;
      }
      case 'cancel':
        this.cancel(msg.msg.value.reason || 'cancelled by the client');
        return;
      default:
        return;
    }
  }

  cancel(reason: string): void {
    if (this.abort.signal.aborted) return;
    this.abort.abort(reason);
    for (const c of this.cards.values()) c.settle({ closed: reason });
    for (const r of this.bridges.values())
      r({ content: [{ type: 'text', text: `bridged call abandoned: ${reason}` }], isError: true });
  }

  /** Input ended (client half-closed): nobody can answer any more. */
  inputEnded(): void {
    for (const c of this.cards.values()) c.settle({ closed: 'the client closed its side of the stream' });
    for (const r of this.bridges.values())
      r({ content: [{ type: 'text', text: 'the client closed its side of the stream' }], isError: true });
  }

  private write(out: CallToolOutput['msg']): void {
    if (this.ended || this.sink.gone) return;
    this.sink.write(create(CallToolOutputSchema, { msg: out }));
  }

  progress(text: string): void {
    this.write({ case: 'progress', value: { $typeName: 'tether.v1.Progress', text } });
  }

  private showCard(kind: QuestionKind, card: QuestionCard): Promise<Answer | { timeout: true } | { closed: string }> {
    const id = `q-${randomUUID()}`;
    return new Promise((resolve) => {
      const seconds =
        card.timeoutSeconds && card.timeoutSeconds > 0 ? card.timeoutSeconds : this.questionTimeoutSeconds;
      const timer = setTimeout(() => open.settle({ timeout: true }), seconds * 1000);
      const open: OpenCard = {
        card,
        kind,
        send: (rejected) =>
          this.write({
            case: 'question',
            value: create(QuestionSchema, {
              id,
              kind,
              question: card.question,
              context: card.context ?? '',
              options: card.options.map((o, i) =>
                create(QuestionOptionSchema, { number: i + 1, label: o.label, description: o.description ?? '' }),
              ),
              allowFreeText: card.allowFreeText,
              multiSelect: card.multiSelect,
              targetSpace: this.targetSpace,
              rejectedReason: rejected ?? '',
            }),
          }),
        settle: (a) => {
          clearTimeout(timer);
          this.cards.delete(id);
          resolve(a);
        },
      };
      this.cards.set(id, open);
      if (this.signal.aborted) return open.settle({ closed: String(this.signal.reason) });
      open.send();
    });
  }

  /** An ASK card. Fails closed when no human is connected to this stream. */
  async ask(card: QuestionCard): Promise<QuestionOutcome> {
    if (!this.start.acceptsQuestions) {
      return {
        kind: 'unavailable',
        reason: 'no human is connected to this call (the client did not declare accepts_questions)',
      };
    }
    const a = await this.showCard(QuestionKind.ASK, card);
    const outcome: QuestionOutcome =
      'timeout' in a ? { kind: 'timeout' } : 'closed' in a ? { kind: 'unavailable', reason: a.closed } : outcomeOf(a);
    this.observed.question('ask', outcome.kind, card.options.length);
    return outcome;
  }

  /** A PERMISSION card for an approval prompt; no human connected means refused. */
  async askPermission(question: string, context: string): Promise<PermissionOutcome> {
    if (!this.start.acceptsQuestions)
      return { kind: 'denied', reason: 'approval is required and no human is connected to approve it' };
    const a = await this.showCard(QuestionKind.PERMISSION, {
      question,
      context,
      options: [{ label: 'Approve' }, { label: 'Deny' }],
      allowFreeText: true,
      multiSelect: false,
    });
    if ('timeout' in a) {
      this.observed.question('permission', 'timeout', 2);
      return { kind: 'denied', reason: 'nobody answered the approval prompt in time' };
    }
    if ('closed' in a) {
      this.observed.question('permission', 'unavailable', 2);
      return { kind: 'denied', reason: a.closed };
    }
    const approved = a.approved || (!a.skipped && a.selected.length === 1 && a.selected[0] === 1);
    this.observed.question('permission', approved ? 'approved' : a.skipped ? 'skipped' : 'denied', 2);
    if (approved) return { kind: 'approved' };
    const said = a.freeText.trim();
    return {
      kind: 'denied',
      reason: said
        ? `the human did not approve it and wrote: ${said}`
        : a.skipped
          ? 'the human skipped the approval'
          : 'the human denied it',
    };
  }

  /** Runs a bridged call of this call, counted as work the call's signal may still have to stop. */
  async during<T>(work: () => Promise<T>): Promise<T> {
    this.bridging++;
    try {
      return await work();
    } finally {
      this.bridging--;
    }
  }

  /** Forwards a tool the gateway does not own to the client, and waits for its result. */
  bridgeToClient(tool: string, argsJson: string): Promise<ToolResult> {
    const bridgeId = `b-${randomUUID()}`;
    return new Promise((resolve) => {
      this.bridges.set(bridgeId, (r) => {
        this.bridges.delete(bridgeId);
        resolve(r);
      });
      if (this.signal.aborted)
        return this.bridges.get(bridgeId)!({
          content: [{ type: 'text', text: String(this.signal.reason) }],
          isError: true,
        });
      this.write({
        case: 'bridgeCall',
        value: { $typeName: 'tether.v1.BridgeCall', bridgeId, tool, argumentsJson: argsJson },
      });
    });
  }

  /** Sends the one final result and ends the call. */
  finish(result: ToolResult): void {
    if (this.ended) return;
    this.write({ case: 'result', value: toProtoResult(result) as PbToolResult });
    this.dispose();
    this.sink.end();
  }

  /** Releases timers and open cards without ending the call (its error status will). */
  dispose(): void {
    this.ended = true;
    if (this.deadlineTimer) clearTimeout(this.deadlineTimer);
    for (const c of this.cards.values()) c.settle({ closed: 'the call ended' });
  }
}
