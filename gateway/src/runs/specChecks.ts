import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { status } from '@grpc/grpc-js';
import type { GatewayConfig } from '../config';
import { GatewayError, invalid } from '../errors';
import type { RunSpec } from './RunRecord';

const LABEL_KEY = /^[a-zA-Z0-9][a-zA-Z0-9._\-/]{0,62}$/;

/** Checks a CreateRun request against the server's rules before anything starts, and fills in its limits. */
export function normalizeSpec(config: GatewayConfig, spec: RunSpec): RunSpec {
  if (spec.conversationId.length > 256) throw invalid('conversation_id is longer than 256 characters');
  if (spec.features.questions.enabled && !spec.features.questions.targetSpace.trim()) {
    throw invalid('features.questions needs a target_space: somewhere the card is shown');
  }
  for (const [k, v] of Object.entries(spec.labels)) {
    if (!LABEL_KEY.test(k) || k.startsWith('dev.tether.'))
      throw invalid(`label key ${JSON.stringify(k)} is not allowed`);
    if (v.length > 256) throw invalid(`label ${k} is longer than 256 characters`);
  }
  if (Object.keys(spec.labels).length > 32) throw invalid('at most 32 labels');
  const max = config.limits.max;
  const def = config.limits.default;
  const pick = (asked: number, d: number, m: number, name: string) => {
    if (asked > m) throw invalid(`limits.${name} ${asked} is above the server maximum ${m}`);
    return asked > 0 ? asked : Math.min(d, m);
  };
  // A host workspace belongs to the platform: the gateway neither sizes nor reserves it.
  if (spec.workspace && spec.limits.diskMb > 0)
    throw invalid('limits.disk_mb applies only to workspaces the gateway creates, not to a host workspace');
  const limits = {
    memoryMb: pick(spec.limits.memoryMb, def.memoryMb, max.memoryMb, 'memory_mb'),
    cpuMillis: pick(spec.limits.cpuMillis, def.cpuMillis, max.cpuMillis, 'cpu_millis'),
    pids: pick(spec.limits.pids, def.pids, max.pids, 'pids'),
    diskMb: spec.workspace ? 0 : pick(spec.limits.diskMb ?? 0, def.diskMb, max.diskMb, 'disk_mb'),
  };
  if (limits.memoryMb < 64) throw invalid('limits.memory_mb must be at least 64');
  if (limits.pids < 16) throw invalid('limits.pids must be at least 16');
  if (!spec.workspace && limits.diskMb < 16) throw invalid('limits.disk_mb must be at least 16');
  return { ...spec, limits };
}

/** The real path of a host workspace, if it lies under one of the roots the server allows. */
export async function checkWorkspace(roots: string[], dir: string): Promise<string> {
  if (!path.isAbsolute(dir)) throw invalid('workspace must be an absolute host path');
  let real: string;
  try {
    real = await fs.realpath(dir);
  } catch {
    throw invalid(`workspace ${dir} does not exist`);
  }
  for (const root of roots) {
    const r = await fs.realpath(root).catch(() => path.resolve(root));
    if (real === r || real.startsWith(r + path.sep)) return real;
  }
  throw new GatewayError(status.PERMISSION_DENIED, `workspace ${dir} is not under a root this server allows`);
}
