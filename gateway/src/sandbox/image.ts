import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import type { GatewayConfig } from '../config';

/** The file scripts/setup.sh writes the built image tags to. */
export const IMAGES_ENV = path.resolve(__dirname, '../../../../.tether/images.env');

/** Reads KEY=value lines; a missing file is an empty map. */
export function readImagesEnv(file = IMAGES_ENV): Record<string, string> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return {};
  }
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const m = /^\s*([A-Z_][A-Z0-9_]*)=(.*)$/.exec(line);
    if (m) out[m[1]] = m[2].trim();
  }
  return out;
}

/** The runner image: the configured one, else the one scripts/setup.sh last built here. */
export function resolveImage(config: GatewayConfig): string {
  return config.docker.image || readImagesEnv().TETHER_IMAGE || '';
}
