import type Docker from 'dockerode';

/**
 * Runs a short-lived container of the gateway's own (a workspace copier, a checkpoint linker)
 * to its end and removes it. Rejects with its exit code and the end of what it said when it
 * failed; what it was made for says what went wrong in `doing`.
 */
export async function runHelper(docker: Docker, doing: string, options: Docker.ContainerCreateOptions): Promise<void> {
  let helper: Docker.Container | undefined;
  try {
    helper = await docker.createContainer(options);
    await helper.start();
    const { StatusCode } = (await helper.wait()) as { StatusCode: number };
    if (StatusCode !== 0) {
      const said = (await helper.logs({ stdout: true, stderr: true }).catch(() => Buffer.alloc(0))) as Buffer;
      throw new Error(`${doing} failed (exit ${StatusCode}): ${said.toString('utf8').slice(-300).trim()}`);
    }
  } finally {
    await helper?.remove({ force: true }).catch(() => undefined);
  }
}
