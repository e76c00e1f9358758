import type { JsonSchema } from '../../../../protocol/src/tools';

export const MAX_OPTIONS = 20;

export interface AskUserArgs {
  question: string;
  context?: string;
  options?: { label: string; description?: string }[];
  allow_free_text?: boolean;
  multi_select?: boolean;
}

export const askUserSchema: JsonSchema = {
  type: 'object',
  properties: {
    question: { type: 'string', minLength: 1, maxLength: 2000, description: 'What to ask, as one clear question.' },
    context: { type: 'string', maxLength: 4000, description: 'Why you ask, what you will assume if nobody answers, and what changes with the answer.' },
    options: {
      type: 'array',
      maxItems: MAX_OPTIONS,
      description: 'Choices, numbered 1..n on the card in this order.',
      items: {
        type: 'object',
        properties: {
          label: { type: 'string', minLength: 1, maxLength: 200 },
          description: { type: 'string', maxLength: 1000 },
        },
        required: ['label'],
        additionalProperties: false,
      },
    },
    allow_free_text: { type: 'boolean', description: 'Whether a typed answer is accepted. Default: true when there are no options, false otherwise.' },
    multi_select: { type: 'boolean', description: 'Whether several options may be chosen. Default false.' },
  },
  required: ['question'],
  additionalProperties: false,
};
