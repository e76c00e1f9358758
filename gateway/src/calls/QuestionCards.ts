import type { QuestionCard, QuestionOutcome } from '../../../protocol/src/calls';
import type { PermissionOutcome } from './CallPort';

/** A human's answer to a card, as the client sent it. */
export interface CardAnswer {
  readonly selected: readonly number[];
  readonly freeText: string;
  readonly skipped: boolean;
  /** A client's own approve button on a PERMISSION card, whatever was selected. */
  readonly approved: boolean;
}

/** Checks an answer against its card; returns why it is rejected, or undefined when valid. */
export function rejectReason(card: QuestionCard, answer: CardAnswer): string | undefined {
  if (answer.skipped) return undefined;
  const n = card.options.length;
  const selected = answer.selected;
  const free = answer.freeText.trim();
  for (const s of selected) {
    if (!Number.isInteger(s) || s < 1 || s > n)
      return n === 0 ? 'this card has no options to select' : `option ${s} does not exist; choose 1 to ${n}`;
  }
  if (new Set(selected).size !== selected.length) return 'an option was selected twice';
  if (selected.length > 1 && !card.multiSelect) return 'only one option may be selected on this card';
  if (free && !card.allowFreeText) return 'this card does not accept a typed answer; pick an option';
  if (selected.length === 0 && !free)
    return card.options.length > 0 ? 'choose an option, or skip' : 'type an answer, or skip';
  return undefined;
}

export function outcomeOf(answer: CardAnswer): QuestionOutcome {
  if (answer.skipped) return { kind: 'skipped' };
  const free = answer.freeText.trim();
  return { kind: 'answered', selected: [...answer.selected], ...(free ? { freeText: free } : {}) };
}

/** An approval prompt's card: option 1 approves; a typed answer says why not. */
export function permissionCard(question: string, context: string): QuestionCard {
  return {
    question,
    context,
    options: [{ label: 'Approve' }, { label: 'Deny' }],
    allowFreeText: true,
    multiSelect: false,
  };
}

/** What an answered approval card comes to; anything but a plain approval is a refusal. */
export function permissionOf(answer: CardAnswer): PermissionOutcome {
  const approved = answer.approved || (!answer.skipped && answer.selected.length === 1 && answer.selected[0] === 1);
  if (approved) return { kind: 'approved' };
  const said = answer.freeText.trim();
  return {
    kind: 'denied',
    card: answer.skipped ? 'skipped' : 'denied',
    reason: said
      ? `the human did not approve it and wrote: ${said}`
      : answer.skipped
        ? 'the human skipped the approval'
        : 'the human denied it',
  };
}
