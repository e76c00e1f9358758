import type { QuestionCard, QuestionOutcome } from '../../../protocol/src/calls';
import type { Answer } from '@tether/contract';

/** Checks an answer against its card; returns why it is rejected, or undefined when valid. */
export function rejectReason(card: QuestionCard, answer: Answer): string | undefined {
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

export function outcomeOf(answer: Answer): QuestionOutcome {
  if (answer.skipped) return { kind: 'skipped' };
  const free = answer.freeText.trim();
  return { kind: 'answered', selected: [...answer.selected], ...(free ? { freeText: free } : {}) };
}
