import type * as vibe from '../../../runner/src/tools/vibe/protocol';

// The gateway ships without the runner's tool families, so it names the vibe family's command
// and event here; the types tie them to the runner's names at compile time.
export const VIBE_FAMILY: typeof vibe.VIBE_FAMILY = 'vibe';
export const WORKER_EVENT: typeof vibe.WORKER_EVENT = 'vibe.worker';
