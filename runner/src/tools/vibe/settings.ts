import { Type, type Static } from '@sinclair/typebox';
import type { RunContext } from '../../run';
import { checkedSettings } from '../../util/settings';
import type { WorkerTier } from '../../../../protocol/src/workers';

const clientTier = Type.Object(
  { backend: Type.Literal('client') },
  { additionalProperties: false, description: 'The platform runs the worker; tether delivers work on WatchWorkers.' },
);
const commandTier = Type.Object(
  {
    backend: Type.Literal('command'),
    command: Type.Array(Type.String({ minLength: 1 }), { minItems: 1 }),
    env: Type.Optional(
      Type.Unsafe<Record<string, string>>({ type: 'object', additionalProperties: { type: 'string' } }),
    ),
    timeoutSeconds: Type.Optional(Type.Number({ exclusiveMinimum: 0 })),
  },
  {
    additionalProperties: false,
    description: 'A command run in the workspace with the brief on stdin; its exit settles the worker.',
  },
);
const tierSchema = Type.Union([clientTier, commandTier]);
export type TierBackend = Static<typeof tierSchema>;

const tiersSchema = Type.Object({ fast: tierSchema, good: tierSchema } satisfies Record<WorkerTier, unknown>, {
  additionalProperties: false,
});

const settingsSchema = Type.Object(
  {
    maxLiveWorkers: Type.Integer({ minimum: 1, maximum: 64 }),
    maxWorkers: Type.Integer({
      minimum: 1,
      maximum: 10000,
      description: 'Workers a run may spawn in all (settled ones stay in the roster with their results).',
    }),
    outputLimitBytes: Type.Integer({ minimum: 1024, description: 'Output kept per command worker round (the tail).' }),
    waitDefaultSeconds: Type.Number({ exclusiveMinimum: 0 }),
    killGraceMs: Type.Integer({ minimum: 0 }),
    tiers: tiersSchema,
  },
  { additionalProperties: false },
);

/** The gateway config key `runner.vibe`. */
export type VibeSettings = Static<typeof settingsSchema>;

export const VIBE_DEFAULTS: VibeSettings = {
  maxLiveWorkers: 4,
  maxWorkers: 100,
  outputLimitBytes: 64 * 1024,
  waitDefaultSeconds: 120,
  killGraceMs: 2000,
  tiers: { fast: { backend: 'client' }, good: { backend: 'client' } },
};

/** What the config may give: any of the keys, and either tier alone; the defaults fill in the rest. */
const givenSchema = Type.Partial(
  Type.Object({ ...settingsSchema.properties, tiers: Type.Partial(tiersSchema) }, { additionalProperties: false }),
);

/** The run's vibe settings; a bad server config fails the run's start with the reason. */
export function vibeSettings(run: RunContext): VibeSettings {
  const given = checkedSettings(run, 'vibe', givenSchema);
  return { ...VIBE_DEFAULTS, ...given, tiers: { ...VIBE_DEFAULTS.tiers, ...(given.tiers ?? {}) } };
}
