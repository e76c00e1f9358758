/**
 * Cold creates one after another, the way a new user tries them: pool off, disk limits on
 * (`docker.disk: loop`, the default), each CreateRun → first tool call answered, with a
 * `docker run` of the same image to its first output interleaved as the baseline of that very
 * create. Every create is compared, not the first only: the spare workspace disks a create
 * takes must not run out when creates follow each other.
 * Usage: node dist/bench/cold-create.js [creates=10] [repeats=3] [runtime=runc]
 */
import { resultText } from '../clients/typescript/src';
import { defaultConfig } from '../gateway/src/config';
import { readImagesEnv } from '../gateway/src/sandbox/image';
import { startTestGateway } from '../test/helpers/gateway';
import { dockerRunOnce, dockerRuntimes, summary, writeResult } from './lib';

const CREATES = Number(process.argv[2] ?? 10);
const REPEATS = Number(process.argv[3] ?? 3);
const RUNTIME = process.argv[4] ?? 'runc';
const image = process.env.TETHER_IMAGE || readImagesEnv().TETHER_IMAGE;
if (!image) throw new Error('no runner image: run scripts/setup.sh');

async function main() {
  if (!(await dockerRuntimes()).includes(RUNTIME)) throw new Error(`the engine has no runtime ${RUNTIME}`);
  const t = await startTestGateway({
    provider: 'docker',
    docker: { ...defaultConfig().docker, image, runtime: RUNTIME, disk: 'loop' },
    pool: { ...defaultConfig().pool, size: 0 },
  });
  const rounds: { tetherMs: number[]; dockerRunMs: number[]; ratio: number[] }[] = [];
  try {
    // Unmeasured: the image's layers into the page cache, the engine's first container.
    const warm = await t.alice.createRun({ conversationId: 'warm' });
    await t.alice.deleteRun(warm.runId);
    await dockerRunOnce(image!, RUNTIME);
    for (let r = 0; r < REPEATS; r++) {
      const round = { tetherMs: [] as number[], dockerRunMs: [] as number[], ratio: [] as number[] };
      for (let i = 0; i < CREATES; i++) {
        const base = await dockerRunOnce(image!, RUNTIME);
        const t0 = performance.now();
        const run = await t.alice.createRun({ conversationId: `cold-${r}-${i}` });
        if (run.error) throw new Error(run.error);
        const out = await t.alice.callTool(run.runId, 'read', { path: 'missing.txt' });
        const took = performance.now() - t0;
        if (!resultText(out.result).includes('missing.txt')) throw new Error(resultText(out.result));
        await t.alice.deleteRun(run.runId);
        round.tetherMs.push(Math.round(took * 10) / 10);
        round.dockerRunMs.push(Math.round(base * 10) / 10);
        round.ratio.push(Math.round((took / base) * 100) / 100);
      }
      rounds.push(round);
      console.error(`round ${r + 1}: ratios ${round.ratio.join(' ')}`);
    }
  } finally {
    await t.close();
  }
  const all = (k: 'tetherMs' | 'dockerRunMs' | 'ratio') => rounds.flatMap((x) => x[k]);
  writeResult(`cold-create-${RUNTIME}`, {
    description: `${CREATES} CreateRun → first tool call (read) answered one after another, pool off, docker.disk loop, runtime ${RUNTIME}; before each, \`docker run --rm --network none --log-driver none\` of the same image to its first output (node -e); ${REPEATS} rounds`,
    image,
    tetherMs: summary(all('tetherMs')),
    dockerRunMs: summary(all('dockerRunMs')),
    ratioEachCreate: summary(all('ratio')),
    worstRatio: Math.max(...all('ratio')),
    rounds,
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
