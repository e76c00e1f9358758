/**
 * What a card and a worker add to a call, next to a plain `read` call measured in the same run:
 * an ask_user card answered at once, a write under PROMPT approved at once vs the same write
 * under AUTO, and a command worker (`true`) spawned and waited for.
 * Usage: node dist/bench/cards-and-workers.js [calls] [provider]
 */
import { Approval } from '@tether/contract';
import { startTestGateway } from '../test/helpers/gateway';
import { summary, timeIt, writeResult } from './lib';

const CALLS = Number(process.argv[2] ?? 500);
const PROVIDER = (process.argv[3] ?? 'process') as 'process' | 'docker';

async function main() {
  const t = await startTestGateway({
    provider: PROVIDER,
    runner: {
      vibe: {
        maxLiveWorkers: 4,
        tiers: { fast: { backend: 'command', command: ['true'] }, good: { backend: 'client' } },
      },
    },
  });
  try {
    const features = { vibe: true, questions: { enabled: true, targetSpace: 'bench' } };
    const prompt = await t.alice.createRun({ features, approvals: { write: Approval.PROMPT } });
    const auto = await t.alice.createRun({ features, approvals: { write: Approval.AUTO } });
    await t.alice.putFileMap(prompt.runId, { 'bench.txt': 'hello\n' });
    const must = async (p: Promise<{ result: { isError: boolean } }>) => {
      if ((await p).result.isError) throw new Error('call failed');
    };
    const cases: Record<string, () => Promise<unknown>> = {
      'read (baseline)': () => must(t.alice.callTool(prompt.runId, 'read', { path: 'bench.txt' })),
      'ask_user answered at once': () =>
        must(
          t.alice.callTool(
            prompt.runId,
            'ask_user',
            { question: 'Go?', options: [{ label: 'yes' }, { label: 'no' }] },
            { onQuestion: () => ({ selected: [1] }) },
          ),
        ),
      'write, AUTO': () => must(t.alice.callTool(auto.runId, 'write', { path: 'w.txt', content: 'x' })),
      'write, PROMPT approved at once': () =>
        must(
          t.alice.callTool(
            prompt.runId,
            'write',
            { path: 'w.txt', content: 'x' },
            { onQuestion: () => ({ approved: true }) },
          ),
        ),
      'vibe_spawn + vibe_wait of `true`': async () => {
        const s = await t.alice.callTool(auto.runId, 'vibe_spawn', { brief: 'nothing', label: 'bench' });
        const id = JSON.parse(s.result.structuredJson).id;
        const w = await t.alice.callTool(auto.runId, 'vibe_wait', { worker_id: id, timeout_seconds: 30 });
        if (JSON.parse(w.result.structuredJson).status !== 'done') throw new Error('worker did not finish');
      },
    };
    const results: Record<string, unknown> = { provider: PROVIDER, calls: CALLS };
    for (const [name, fn] of Object.entries(cases)) {
      for (let i = 0; i < 20; i++) await fn();
      const samples: number[] = [];
      for (let i = 0; i < CALLS; i++) samples.push(await timeIt(fn));
      results[name] = summary(samples);
    }
    writeResult(`cards-and-workers-${PROVIDER}`, results);
  } finally {
    await t.close();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
