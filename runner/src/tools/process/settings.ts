import { Type, type Static } from '@sinclair/typebox';
import type { RunContext } from '../../run';
import { checkedSettings } from '../../util/settings';

const settingsSchema = Type.Object(
  {
    maxOutputBytes: Type.Integer({
      minimum: 1024,
      description: 'Output one process may write over all its streams; past it its process group is killed.',
    }),
    maxLiveProcesses: Type.Integer({ minimum: 1, maximum: 4096, description: 'Processes running at once in a run.' }),
    python: Type.String({ minLength: 1, description: 'The Python 3 that runs the PTY helper (ptyhost.py).' }),
  },
  { additionalProperties: false },
);

/** The gateway config key `runner.process`. */
export type ProcessSettings = Static<typeof settingsSchema>;

export const PROCESS_DEFAULTS: ProcessSettings = {
  maxOutputBytes: 64 * 1024 * 1024,
  maxLiveProcesses: 64,
  python: 'python3',
};

/** The run's process settings; a bad server config fails the run's start with the reason. */
export function processSettings(run: RunContext): ProcessSettings {
  return { ...PROCESS_DEFAULTS, ...checkedSettings(run, 'process', Type.Partial(settingsSchema)) };
}
