import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { templateBuilder } from '../../../gateway/src/sandbox/templateEngine';
import { buildTemplate, type TemplateBuildResult } from '../../../gateway/src/templates/build';

const REPO = path.resolve(__dirname, '../../../..');

/**
 * Builds the template of test/fixtures/templates/warm: its project/ is a real TypeScript project
 * (@grpc/grpc-js's own sources, 68 files, from this checkout's node_modules, with a tsconfig)
 * and the Python project of the lsp tests under py/. `variant` changes one file of the build
 * context, so the template is rebuilt as a new image: a template changed after its snapshot.
 */
export async function buildWarmTemplate(name: string, variant = ''): Promise<TemplateBuildResult> {
  const base = process.env.TETHER_IMAGE;
  if (!base) throw new Error('TETHER_IMAGE is not set: run this through scripts/test.sh');
  const ctx = mkdtempSync(path.join(os.tmpdir(), 'tether-warm-template-'));
  try {
    const fixture = path.join(REPO, 'test/fixtures/templates/warm');
    cpSync(path.join(fixture, 'Dockerfile'), path.join(ctx, 'Dockerfile'));
    cpSync(path.join(fixture, 'warmup.json'), path.join(ctx, 'warmup.json'));
    const project = path.join(ctx, 'project');
    const grpc = path.join(REPO, 'node_modules/@grpc/grpc-js');
    cpSync(path.join(grpc, 'src'), path.join(project, 'src'), { recursive: true });
    cpSync(path.join(grpc, 'package.json'), path.join(project, 'package.json'));
    cpSync(path.join(fixture, 'tsconfig.json'), path.join(project, 'tsconfig.json'));
    cpSync(path.join(REPO, 'test/fixtures/lsp/py'), path.join(project, 'py'), { recursive: true });
    if (variant) writeFileSync(path.join(project, 'VARIANT'), `${variant}\n`);
    return await buildTemplate({ name, dir: ctx, baseImage: base, builder: templateBuilder() });
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
}
