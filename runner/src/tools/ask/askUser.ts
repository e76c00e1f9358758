import type { QuestionCard, QuestionOutcome } from '../../../../protocol/src/calls';
import type { ToolResult } from '../../../../protocol/src/tools';
import { ToolError, fail, ok, type ToolDefinition } from '../../tool';
import { askUserSchema, type AskUserArgs } from './schemas';

/** What the model must do when it gets no answer: the same words for skip and timeout. */
export const GO_ON = 'Go on under the assumption you stated, and do not ask this question again.';

/** Builds the card from the model's arguments; a card nobody could answer is refused. */
export function cardOf(args: AskUserArgs): QuestionCard {
  const options = (args.options ?? []).map((o) => ({
    label: o.label.trim(),
    ...(o.description?.trim() ? { description: o.description.trim() } : {}),
  }));
  if (options.some((o) => o.label === '')) throw new ToolError('every option needs a non-blank label');
  const labels = new Set(options.map((o) => o.label.toLowerCase()));
  if (labels.size !== options.length) throw new ToolError('two options have the same label; make each choice distinct');
  const allowFreeText = args.allow_free_text ?? options.length === 0;
  const multiSelect = args.multi_select ?? false;
  if (options.length === 0 && !allowFreeText)
    throw new ToolError('this card could not be answered: give options, or allow a typed answer (allow_free_text)');
  if (multiSelect && options.length < 2) throw new ToolError('multi_select needs at least two options');
  if (!args.question.trim()) throw new ToolError('question is blank');
  return {
    question: args.question.trim(),
    ...(args.context?.trim() ? { context: args.context.trim() } : {}),
    options,
    allowFreeText,
    multiSelect,
  };
}

/** Turns the human's reaction to the card into what the model reads. */
export function resultOf(card: QuestionCard, outcome: QuestionOutcome): ToolResult {
  switch (outcome.kind) {
    case 'answered': {
      const chosen = outcome.selected.map((n) => ({ number: n, label: card.options[n - 1]?.label ?? `option ${n}` }));
      const lines = chosen.map((c) => `${c.number}. ${c.label}`);
      const parts: string[] = [];
      if (lines.length === 1) parts.push(`The user chose ${lines[0]}`);
      else if (lines.length > 1) parts.push(`The user chose:\n${lines.map((l) => `- ${l}`).join('\n')}`);
      if (outcome.freeText) parts.push(`${lines.length ? 'They added' : 'The user answered'}: ${outcome.freeText}`);
      return ok(parts.join('\n'), {
        status: 'answered',
        selected: chosen,
        ...(outcome.freeText ? { free_text: outcome.freeText } : {}),
      });
    }
    case 'skipped':
      return ok(`The user skipped this question. ${GO_ON}`, { status: 'skipped' });
    case 'timeout':
      return fail(`Nobody answered this question in time. ${GO_ON}`, { status: 'timeout' });
    case 'unavailable':
      return fail(
        `No human can answer right now (${outcome.reason}), so the question was not shown. Do not wait for an answer: decide on your own, say which assumption you made, and do not retry ask_user in this call.`,
        {
          status: 'unavailable',
          reason: outcome.reason,
        },
      );
  }
}

/**
 * Questions of this run that went unanswered (skipped or timed out). Asking one of them again
 * gets the same answer at once, without showing the human the card a second time.
 */
export class UnansweredQuestions {
  private readonly seen = new Map<string, 'skipped' | 'timeout'>();

  private static key(question: string): string {
    return question
      .toLowerCase()
      .replace(/\s+/g, ' ')
      .replace(/[\s?.!:]+$/, '')
      .trim();
  }

  get(question: string): 'skipped' | 'timeout' | undefined {
    return this.seen.get(UnansweredQuestions.key(question));
  }

  remember(question: string, outcome: QuestionOutcome): void {
    if (outcome.kind === 'skipped' || outcome.kind === 'timeout')
      this.seen.set(UnansweredQuestions.key(question), outcome.kind);
  }
}

function repeated(card: QuestionCard, earlier: 'skipped' | 'timeout'): ToolResult {
  const r = resultOf(card, { kind: earlier });
  const first = r.content[0] as { type: 'text'; text: string };
  const note = `This question was already asked in this run and ${earlier === 'skipped' ? 'skipped' : 'not answered in time'}; it was not shown again. `;
  return {
    ...r,
    content: [{ type: 'text', text: note + first.text }],
    structured: { ...(r.structured as object), repeated: true },
  };
}

export function askUserTool(unanswered = new UnansweredQuestions()): ToolDefinition<AskUserArgs> {
  return {
    name: 'ask_user',
    description:
      'Ask the human operator a question and wait for the answer. The only way to ask something: a question written as a chat message would end your turn instead. ' +
      'Shows a numbered card; state in `context` what you will assume if nobody answers. A skipped or unanswered question means: go on under that assumption, and do not ask it again.',
    tier: 'read',
    inputSchema: askUserSchema,
    // Several cards may be open at once; each waits for its own answer.
    parallelSafe: true,
    async run(args, ctx) {
      const card = cardOf(args);
      const earlier = unanswered.get(card.question);
      if (earlier) return repeated(card, earlier);
      const outcome = await ctx.ask(card);
      unanswered.remember(card.question, outcome);
      return resultOf(card, outcome);
    },
  };
}
