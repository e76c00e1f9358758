import type { JsonSchema } from '../../../../protocol/src/tools';
import type { WorkerTier } from '../../../../protocol/src/workers';

export const MAX_BRIEF_CHARS = 64 * 1024;
/** A brief grows with every vibe_send; past this, a fresh worker is the better tool. */
export const MAX_TOTAL_BRIEF_CHARS = 256 * 1024;
export const MAX_WAIT_SECONDS = 3600;

const workerId = { type: 'string', minLength: 1, maxLength: 32, description: 'The id vibe_spawn returned (e.g. "w1").' };

export interface SpawnArgs {
  brief: string;
  label: string;
  tier?: WorkerTier;
}
export const spawnSchema: JsonSchema = {
  type: 'object',
  properties: {
    brief: { type: 'string', minLength: 1, maxLength: MAX_BRIEF_CHARS, description: 'Everything the worker needs: goal, files, constraints, what "done" means.' },
    label: { type: 'string', minLength: 1, maxLength: 80, description: 'A short name for the roster.' },
    tier: { enum: ['fast', 'good'], description: '"fast" for mechanical work with a clear spec (default); "good" for design, judgement, or reviewing a fast worker\'s output.' },
  },
  required: ['brief', 'label'],
  additionalProperties: false,
};

export interface SendArgs {
  worker_id: string;
  message: string;
}
export const sendSchema: JsonSchema = {
  type: 'object',
  properties: {
    worker_id: workerId,
    message: { type: 'string', minLength: 1, maxLength: MAX_BRIEF_CHARS, description: 'Appended to the brief; the worker then runs again on the whole brief.' },
  },
  required: ['worker_id', 'message'],
  additionalProperties: false,
};

export interface WaitArgs {
  worker_id: string;
  timeout_seconds?: number;
}
export const waitSchema: JsonSchema = {
  type: 'object',
  properties: {
    worker_id: workerId,
    timeout_seconds: { type: 'number', exclusiveMinimum: 0, maximum: MAX_WAIT_SECONDS, description: 'How long to wait before returning "still running".' },
  },
  required: ['worker_id'],
  additionalProperties: false,
};

export interface KillArgs {
  worker_id: string;
}
export const killSchema: JsonSchema = {
  type: 'object',
  properties: { worker_id: workerId },
  required: ['worker_id'],
  additionalProperties: false,
};

export const listSchema: JsonSchema = { type: 'object', properties: {}, additionalProperties: false };
