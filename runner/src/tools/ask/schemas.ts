import { Type, type Static } from '@sinclair/typebox';

export const MAX_OPTIONS = 20;

export const askUserSchema = Type.Object(
  {
    question: Type.String({ minLength: 1, maxLength: 2000, description: 'What to ask, as one clear question.' }),
    context: Type.Optional(
      Type.String({
        maxLength: 4000,
        description: 'Why you ask, what you will assume if nobody answers, and what changes with the answer.',
      }),
    ),
    options: Type.Optional(
      Type.Array(
        Type.Object(
          {
            label: Type.String({ minLength: 1, maxLength: 200 }),
            description: Type.Optional(Type.String({ maxLength: 1000 })),
          },
          { additionalProperties: false },
        ),
        { maxItems: MAX_OPTIONS, description: 'Choices, numbered 1..n on the card in this order.' },
      ),
    ),
    allow_free_text: Type.Optional(
      Type.Boolean({
        description: 'Whether a typed answer is accepted. Default: true when there are no options, false otherwise.',
      }),
    ),
    multi_select: Type.Optional(Type.Boolean({ description: 'Whether several options may be chosen. Default false.' })),
  },
  { additionalProperties: false },
);
export type AskUserArgs = Static<typeof askUserSchema>;
