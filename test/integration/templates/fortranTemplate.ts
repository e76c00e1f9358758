import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { buildTemplate, type TemplateBuildResult } from '../../../gateway/src/templates/build';
import { templateBuilder } from '../../../gateway/src/sandbox/templateEngine';

const REPO = path.resolve(__dirname, '../../../..');
const FORTLS = 'fortls==3.2.2';

/**
 * Builds the Fortran template of test/fixtures/templates/fortran on the runner image: the
 * fortls wheels are downloaded on this host once (into .tether/cache), then put into the
 * build context, as a platform would vendor what its template installs.
 */
export async function buildFortranTemplate(name: string): Promise<TemplateBuildResult> {
  const base = process.env.TETHER_IMAGE;
  if (!base) throw new Error('TETHER_IMAGE is not set: run this through scripts/test.sh');
  const wheels = path.join(REPO, '.tether/cache', `wheels-${FORTLS.replace('==', '-')}`);
  if (!existsSync(wheels)) {
    const partial = `${wheels}.partial-${process.pid}`;
    mkdirSync(partial, { recursive: true });
    execFileSync(
      'python3',
      [
        '-m',
        'pip',
        'download',
        '-q',
        '--only-binary=:all:',
        '--python-version',
        '3.11',
        '--implementation',
        'py',
        '--platform',
        'any',
        '-d',
        partial,
        FORTLS,
      ],
      { stdio: 'inherit' },
    );
    renameSync(partial, wheels);
  }
  const ctx = mkdtempSync(path.join(os.tmpdir(), 'tether-template-'));
  try {
    cpSync(path.join(REPO, 'test/fixtures/templates/fortran'), ctx, { recursive: true });
    cpSync(wheels, path.join(ctx, 'wheels'), { recursive: true });
    return await buildTemplate({ name, dir: ctx, baseImage: base, builder: templateBuilder() });
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
}
