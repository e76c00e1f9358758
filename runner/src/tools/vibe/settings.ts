import Ajv from 'ajv';
import type { RunContext } from '../../run';
import type { WorkerTier } from '../../../../protocol/src/workers';

export type TierBackend =
  /** The platform runs the worker; tether delivers work on WatchWorkers. */
  | { backend: 'client' }
  /** A command run in the workspace with the brief on stdin; its exit settles the worker. */
  | { backend: 'command'; command: string[]; env?: Record<string, string>; timeoutSeconds?: number };

/** The gateway config key `runner.vibe`. */
export interface VibeSettings {
  maxLiveWorkers: number;
  /** Workers a run may spawn in all (settled ones stay in the roster with their results). */
  maxWorkers: number;
  /** Output kept per command worker round (the tail). */
  outputLimitBytes: number;
  waitDefaultSeconds: number;
  killGraceMs: number;
  tiers: Record<WorkerTier, TierBackend>;
}

export const VIBE_DEFAULTS: VibeSettings = {
  maxLiveWorkers: 4,
  maxWorkers: 100,
  outputLimitBytes: 64 * 1024,
  waitDefaultSeconds: 120,
  killGraceMs: 2000,
  tiers: { fast: { backend: 'client' }, good: { backend: 'client' } },
};

const tierSchema = {
  oneOf: [
    { type: 'object', properties: { backend: { const: 'client' } }, required: ['backend'], additionalProperties: false },
    {
      type: 'object',
      properties: {
        backend: { const: 'command' },
        command: { type: 'array', minItems: 1, items: { type: 'string', minLength: 1 } },
        env: { type: 'object', additionalProperties: { type: 'string' } },
        timeoutSeconds: { type: 'number', exclusiveMinimum: 0 },
      },
      required: ['backend', 'command'],
      additionalProperties: false,
    },
  ],
};

const settingsSchema = {
  type: 'object',
  properties: {
    maxLiveWorkers: { type: 'integer', minimum: 1, maximum: 64 },
    maxWorkers: { type: 'integer', minimum: 1, maximum: 10000 },
    outputLimitBytes: { type: 'integer', minimum: 1024 },
    waitDefaultSeconds: { type: 'number', exclusiveMinimum: 0 },
    killGraceMs: { type: 'integer', minimum: 0 },
    tiers: { type: 'object', properties: { fast: tierSchema, good: tierSchema }, additionalProperties: false },
  },
  additionalProperties: false,
};

const check = new Ajv({ allErrors: true }).compile(settingsSchema);

/** The run's vibe settings; a bad server config fails the run's start with the reason. */
export function vibeSettings(run: RunContext): VibeSettings {
  const given = run.settingsFor<Partial<VibeSettings>>('vibe', {});
  if (!check(given)) {
    const why = (check.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message}`).join('; ');
    throw new Error(`invalid server config runner.vibe: ${why}`);
  }
  return { ...VIBE_DEFAULTS, ...given, tiers: { ...VIBE_DEFAULTS.tiers, ...(given.tiers ?? {}) } };
}
