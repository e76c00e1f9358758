import { randomUUID } from 'node:crypto';
import type { QuestionCard } from '../../../protocol/src/calls';
import { type CardAnswer, rejectReason } from './QuestionCards';

export type CardKind = 'ask' | 'permission';

/** How a shown card ended: answered, unanswered in time, or closed with the call's reason. */
export type CardReply = CardAnswer | { timeout: true } | { closed: string };

/** Shows a card to the client (again, with `rejected`, after an answer it did not accept). */
export type ShowCard = (id: string, kind: CardKind, card: QuestionCard, rejected?: string) => void;

interface OpenCard {
  card: QuestionCard;
  kind: CardKind;
  settle: (reply: CardReply) => void;
}

/**
 * The cards one call has shown and not yet had answered. An ASK card's answer that does not fit
 * the card is not the human's last word: the card is shown again with the reason. A PERMISSION
 * card takes any answer (anything but an approval refuses).
 */
export class OpenCards {
  private readonly open = new Map<string, OpenCard>();

  constructor(
    private readonly show: ShowCard,
    private readonly defaultTimeoutSeconds: number,
  ) {}

  get size(): number {
    return this.open.size;
  }

  /** Shows a card and waits for its answer, its timeout, or `closeAll`. */
  ask(kind: CardKind, card: QuestionCard): Promise<CardReply> {
    const id = `q-${randomUUID()}`;
    return new Promise((resolve) => {
      const seconds = card.timeoutSeconds && card.timeoutSeconds > 0 ? card.timeoutSeconds : this.defaultTimeoutSeconds;
      const timer = setTimeout(() => settle({ timeout: true }), seconds * 1000);
      const settle = (reply: CardReply) => {
        clearTimeout(timer);
        this.open.delete(id);
        resolve(reply);
      };
      this.open.set(id, { card, kind, settle });
      this.show(id, kind, card);
    });
  }

  /** An answer from the client; one for a card no longer open is dropped. */
  answer(questionId: string, answer: CardAnswer): void {
    const open = this.open.get(questionId);
    if (!open) return;
    if (open.kind === 'ask') {
      const why = rejectReason(open.card, answer);
      if (why) {
        this.show(questionId, open.kind, open.card, why);
        return;
      }
    }
    open.settle(answer);
  }

  /** Nobody can answer any more: every open card ends with the reason. */
  closeAll(reason: string): void {
    for (const c of this.open.values()) c.settle({ closed: reason });
  }
}
