import { Type, type Static } from '@sinclair/typebox';
import { StringEnum } from '../stringEnum';
import type { WorkerTier } from '../../../../protocol/src/workers';

export const MAX_BRIEF_CHARS = 64 * 1024;
/** A brief grows with every vibe_send; past this, a fresh worker is the better tool. */
export const MAX_TOTAL_BRIEF_CHARS = 256 * 1024;
export const MAX_WAIT_SECONDS = 3600;

const WORKER_TIERS = ['fast', 'good'] as const satisfies readonly WorkerTier[];

const workerId = Type.String({ minLength: 1, maxLength: 32, description: 'The id vibe_spawn returned (e.g. "w1").' });

export const spawnSchema = Type.Object(
  {
    brief: Type.String({
      minLength: 1,
      maxLength: MAX_BRIEF_CHARS,
      description: 'Everything the worker needs: goal, files, constraints, what "done" means.',
    }),
    label: Type.String({ minLength: 1, maxLength: 80, description: 'A short name for the roster.' }),
    tier: Type.Optional(
      StringEnum(WORKER_TIERS, {
        description:
          '"fast" for mechanical work with a clear spec (default); "good" for design, judgement, or reviewing a fast worker\'s output.',
      }),
    ),
  },
  { additionalProperties: false },
);
export type SpawnArgs = Static<typeof spawnSchema>;

export const sendSchema = Type.Object(
  {
    worker_id: workerId,
    message: Type.String({
      minLength: 1,
      maxLength: MAX_BRIEF_CHARS,
      description: 'Appended to the brief; the worker then runs again on the whole brief.',
    }),
  },
  { additionalProperties: false },
);
export type SendArgs = Static<typeof sendSchema>;

export const waitSchema = Type.Object(
  {
    worker_id: workerId,
    timeout_seconds: Type.Optional(
      Type.Number({
        exclusiveMinimum: 0,
        maximum: MAX_WAIT_SECONDS,
        description: 'How long to wait before returning "still running".',
      }),
    ),
  },
  { additionalProperties: false },
);
export type WaitArgs = Static<typeof waitSchema>;

export const killSchema = Type.Object({ worker_id: workerId }, { additionalProperties: false });
export type KillArgs = Static<typeof killSchema>;

export const listSchema = Type.Object({}, { additionalProperties: false });
