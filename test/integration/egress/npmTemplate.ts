import { execFileSync } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { buildTemplate, type TemplateBuildResult } from '../../../gateway/src/templates/build';
import { templateBuilder } from '../../../gateway/src/sandbox/templateEngine';

const REPO = path.resolve(__dirname, '../../../..');
/** The npm that ships with the runner's Node 22. */
export const NPM = 'npm@10.9.2';

/**
 * Builds the template of test/fixtures/templates/npm on the runner image: npm's tarball is
 * packed on this host once (into .tether/cache) and put into the build context.
 */
export async function buildNpmTemplate(name: string): Promise<TemplateBuildResult> {
  const base = process.env.TETHER_IMAGE;
  if (!base) throw new Error('TETHER_IMAGE is not set: run this through scripts/test.sh');
  const cache = path.join(REPO, '.tether/cache');
  const tgz = path.join(cache, `${NPM.replace('@', '-')}.tgz`);
  if (!existsSync(tgz)) {
    const partial = mkdtempSync(path.join(os.tmpdir(), 'tether-npm-pack-'));
    execFileSync('npm', ['pack', '--silent', NPM], { cwd: partial, stdio: ['ignore', 'ignore', 'inherit'] });
    mkdirSync(cache, { recursive: true });
    copyFileSync(path.join(partial, path.basename(tgz)), `${tgz}.partial-${process.pid}`);
    renameSync(`${tgz}.partial-${process.pid}`, tgz);
    rmSync(partial, { recursive: true, force: true });
  }
  const ctx = mkdtempSync(path.join(os.tmpdir(), 'tether-template-'));
  try {
    cpSync(path.join(REPO, 'test/fixtures/templates/npm'), ctx, { recursive: true });
    copyFileSync(tgz, path.join(ctx, 'npm.tgz'));
    return await buildTemplate({ name, dir: ctx, baseImage: base, builder: templateBuilder() });
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
}
