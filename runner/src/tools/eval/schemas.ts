import { Type, type Static } from '@sinclair/typebox';
import { StringEnum } from '../stringEnum';
import { ToolError } from '../../tool';

export const MAX_CODE_CHARS = 1024 * 1024;
export const DESCRIPTION_WORDS = { min: 5, max: 10 } as const;

export const evalSchema = Type.Object(
  {
    code: Type.String({
      maxLength: MAX_CODE_CHARS,
      description: 'The cell. Its last expression is echoed; display(x) shows tables and figures.',
    }),
    description: Type.String({
      minLength: 1,
      maxLength: 200,
      pattern: `^\\s*\\S+(\\s+\\S+){${DESCRIPTION_WORDS.min - 1},${DESCRIPTION_WORDS.max - 1}}\\s*$`,
      description: `A ${DESCRIPTION_WORDS.min}–${DESCRIPTION_WORDS.max} word label for the transcript, e.g. "Load the sales data and plot revenue".`,
    }),
    language: Type.Optional(
      StringEnum(['python', 'javascript'], {
        description: 'python (default) or javascript. Each has its own interpreter, kept across calls.',
      }),
    ),
    reset: Type.Optional(
      Type.Boolean({
        description: 'Discard the interpreter (all variables and imports) and start a clean one before this cell.',
      }),
    ),
    timeout_seconds: Type.Optional(
      Type.Number({
        exclusiveMinimum: 0,
        maximum: 86400,
        description:
          'Inactivity budget: the cell is interrupted after this long without output (default 300). Time spent waiting on tool() calls does not count.',
      }),
    ),
  },
  { additionalProperties: false },
);
export type EvalArgs = Static<typeof evalSchema>;

/** Counts the words of a description; throws the message the model sees when out of range. */
export function checkDescription(description: string): void {
  const words = description.trim().split(/\s+/).filter(Boolean).length;
  if (words < DESCRIPTION_WORDS.min || words > DESCRIPTION_WORDS.max) {
    throw new ToolError(
      `description must be ${DESCRIPTION_WORDS.min}–${DESCRIPTION_WORDS.max} words (got ${words}): a short label of what the cell does, e.g. "Load the sales data and plot revenue"`,
    );
  }
}

/** Per-run settings, from the gateway config key runner.eval. */
export interface EvalSettings {
  /** The interpreter of the Python kernel; %pip installs into it. */
  python: string;
  /** The Node of the JavaScript kernel (the runner's own by default). */
  node: string;
  timeoutSeconds: number;
  /** How long an interrupted cell may take to stop before its interpreter is killed. */
  interruptGraceSeconds: number;
  startTimeoutSeconds: number;
  outputHeadChars: number;
  outputTailChars: number;
  /** Characters of printed text a kernel forwards per cell (as progress) before keeping only a tail. */
  streamChars: number;
  tableRows: number;
  tableColumns: number;
  maxRichItems: number;
  imageBytes: number;
  /** A prebuilt matplotlib font cache (made in the runner image) copied into each kernel's config dir. */
  matplotlibCacheSeed: string;
}

export const DEFAULT_SETTINGS: EvalSettings = {
  python: 'python3',
  node: process.execPath,
  timeoutSeconds: 300,
  interruptGraceSeconds: 3,
  startTimeoutSeconds: 60,
  outputHeadChars: 24000,
  outputTailChars: 6000,
  streamChars: 256 * 1024,
  tableRows: 50,
  tableColumns: 40,
  maxRichItems: 20,
  imageBytes: 8 * 1024 * 1024,
  matplotlibCacheSeed: '/opt/tether/matplotlib-cache',
};
