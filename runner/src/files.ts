import * as path from 'node:path';

/**
 * The runner's own files that run apart from it (worker threads, kernel drivers), by their
 * place under the compiled `runner/src`. The runner's image starts one bundle of the runner
 * (scripts/build.sh), in which every module shares one `__dirname`: that of this folder, where
 * the bundle lies, and where this module lies when nothing is bundled.
 */
export function runnerFile(rel: string): string {
  return path.join(__dirname, rel);
}
