import type { CallToolInput, CallToolOutput } from '@tether/contract';
import type { QuestionCard, QuestionOutcome } from '../../../protocol/src/calls';
import type { ToolResult } from '../../../protocol/src/tools';
import type { CallPort, PermissionOutcome } from '../calls/CallPort';
import { ClientBridges } from '../calls/ClientBridges';
import { type CardKind, type CardReply, OpenCards } from '../calls/OpenCards';
import { outcomeOf, permissionCard, permissionOf } from '../calls/QuestionCards';
import { errorResult } from '../calls/results';
import type { CallSink } from './callSink';
import { bridgeCallOutput, progressOutput, questionOutput, readInput, resultOutput } from './callWire';

/**
 * One call's side of whatever carries it (see CallSink), as the port its tools see: progress,
 * cards and bridged calls out, their answers back in, and one abort signal for cancel,
 * disconnect and deadline. The driver feeds it the client's later messages and ends it.
 */
export class CallStream implements CallPort {
  private readonly abort = new AbortController();
  private readonly cards: OpenCards;
  private readonly bridges = new ClientBridges();
  private ended = false;
  /** Bridged calls of this call still under way (see `during`). */
  private bridging = 0;
  private deadlineTimer?: NodeJS.Timeout;
  /** Why nothing can answer any more, once the input has ended. */
  private inputClosed?: string;

  constructor(
    private readonly sink: CallSink,
    private readonly accepts: { acceptsQuestions: boolean; acceptsBridgeCalls: boolean },
    targetSpace: string,
    questionTimeoutSeconds: number,
  ) {
    this.cards = new OpenCards(
      (id, kind, card, rejected) => this.send(questionOutput(id, kind, card, targetSpace, rejected)),
      questionTimeoutSeconds,
    );
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
    return this.accepts.acceptsQuestions;
  }

  get acceptsBridgeCalls(): boolean {
    return this.accepts.acceptsBridgeCalls;
  }

  /** Routes a later input message (answer, bridge result, cancel). */
  receive(msg: CallToolInput): void {
    const input = readInput(msg);
    switch (input?.case) {
      case 'answer':
        this.cards.answer(input.questionId, input.answer);
        return;
      case 'bridgeResult':
        this.bridges.settle(input.bridgeId, input.result);
        return;
      case 'cancel':
        this.cancel(input.reason);
        return;
    }
  }

  cancel(reason: string): void {
    if (this.abort.signal.aborted) return;
    this.abort.abort(reason);
    this.cards.closeAll(reason);
    this.bridges.abandonAll(`bridged call abandoned: ${reason}`);
  }

  /**
   * Input ended (the client half-closed): nobody can answer any more. Open cards and bridged
   * calls end with the reason, and later ones fail closed at once instead of waiting.
   */
  inputEnded(reason = 'the client closed its side of the stream'): void {
    this.inputClosed = reason;
    this.cards.closeAll(reason);
    this.bridges.abandonAll(reason);
  }

  progress(text: string): void {
    this.send(progressOutput(text));
  }

  async ask(card: QuestionCard): Promise<QuestionOutcome> {
    if (!this.acceptsQuestions) {
      return {
        kind: 'unavailable',
        reason: 'no human is connected to this call (the client did not declare accepts_questions)',
      };
    }
    const reply = await this.show('ask', card);
    if ('timeout' in reply) return { kind: 'timeout' };
    if ('closed' in reply) return { kind: 'unavailable', reason: reply.closed };
    return outcomeOf(reply);
  }

  async askPermission(question: string, context: string): Promise<PermissionOutcome> {
    if (!this.acceptsQuestions)
      return { kind: 'denied', reason: 'approval is required and no human is connected to approve it' };
    const reply = await this.show('permission', permissionCard(question, context));
    if ('timeout' in reply)
      return { kind: 'denied', card: 'timeout', reason: 'nobody answered the approval prompt in time' };
    if ('closed' in reply) return { kind: 'denied', card: 'unavailable', reason: reply.closed };
    return permissionOf(reply);
  }

  async during<T>(work: () => Promise<T>): Promise<T> {
    this.bridging++;
    try {
      return await work();
    } finally {
      this.bridging--;
    }
  }

  async bridgeToClient(tool: string, argsJson: string): Promise<ToolResult> {
    if (this.signal.aborted) return errorResult(String(this.signal.reason));
    if (this.inputClosed) return errorResult(this.inputClosed);
    return this.bridges.call((bridgeId) => this.send(bridgeCallOutput(bridgeId, tool, argsJson)));
  }

  /** Sends the one final result and ends the call. */
  finish(result: ToolResult): void {
    if (this.ended) return;
    this.send(resultOutput(result));
    this.dispose();
    this.sink.end();
  }

  /** Releases timers and open cards without ending the call (its error status will). */
  dispose(): void {
    this.ended = true;
    if (this.deadlineTimer) clearTimeout(this.deadlineTimer);
    this.cards.closeAll('the call ended');
  }

  /** A card of a call already cancelled, or whose input has ended, is closed at once, never shown. */
  private show(kind: CardKind, card: QuestionCard): Promise<CardReply> {
    if (this.signal.aborted) return Promise.resolve({ closed: String(this.signal.reason) });
    if (this.inputClosed) return Promise.resolve({ closed: this.inputClosed });
    return this.cards.ask(kind, card);
  }

  private send(out: CallToolOutput): void {
    if (this.ended || this.sink.gone) return;
    this.sink.write(out);
  }
}
