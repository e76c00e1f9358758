import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import type { TemplateImageBuild, TemplateImageBuilder } from './templateImages';

const run = promisify(execFile);

/**
 * Builds template images with the docker CLI and the host network, as scripts/setup.sh does,
 * so the build's package managers reach registries.
 */
export class DockerTemplateBuilder implements TemplateImageBuilder {
  async imageId(ref: string): Promise<string | undefined> {
    try {
      return (await run('docker', ['image', 'inspect', '--format', '{{.Id}}', ref])).stdout.trim();
    } catch {
      return undefined;
    }
  }

  async entrypoint(ref: string): Promise<string[] | null> {
    const { stdout } = await run('docker', ['image', 'inspect', '--format', '{{json .Config.Entrypoint}}', ref]);
    return JSON.parse(stdout);
  }

  async build(build: TemplateImageBuild, progress: NodeJS.WritableStream): Promise<void> {
    const args = [
      'build',
      '--network',
      'host',
      '--force-rm',
      ...Object.entries(build.buildArgs).flatMap(([k, v]) => ['--build-arg', `${k}=${v}`]),
      ...Object.entries(build.labels).flatMap(([k, v]) => ['--label', `${k}=${v}`]),
      '-t',
      build.tag,
      '-f',
      '-',
      build.dir,
    ];
    await new Promise<void>((resolve, reject) => {
      const child = spawn('docker', args, { stdio: ['pipe', 'pipe', 'pipe'] });
      child.stdout.pipe(progress, { end: false });
      child.stderr.pipe(progress, { end: false });
      child.on('error', reject);
      child.on('close', (code) =>
        code === 0 ? resolve() : reject(new Error(`docker build of template ${build.name} failed (exit code ${code})`)),
      );
      child.stdin.end(build.dockerfile);
    });
  }

  async remove(ref: string): Promise<void> {
    await run('docker', ['image', 'rm', ref]);
  }
}
