/**
 * Round trip of a trivial tool call (read of a 1-line file) through
 * gRPC → gateway → runner → back, next to a bare grpc-js unary echo measured in the same run.
 * Under docker, the socket fast path and the stdio fallback (the engine's attach) side by side.
 * Usage: node dist/bench/call-latency.js [calls] [provider] [runtime]
 */
import { echoBaseline } from './echo';
import { startTestGateway } from '../test/helpers/gateway';
import { summary, timeIt, writeResult } from './lib';

const CALLS = Number(process.argv[2] ?? 10_000);
const PROVIDER = (process.argv[3] ?? 'process') as 'process' | 'docker';
const RUNTIME = process.argv[4] ?? '';

async function toolCalls(n: number, fastPath: boolean): Promise<number[]> {
  const base = await import('../gateway/src/config').then((m) => m.defaultConfig().docker);
  const t = await startTestGateway({
    provider: PROVIDER,
    fastPath,
    docker: { ...base, image: process.env.TETHER_IMAGE || base.image, runtime: RUNTIME },
  });
  try {
    const run = await t.alice.createRun({ conversationId: 'bench' });
    await t.alice.putFileMap(run.runId, { 'bench.txt': 'hello\n' });
    const once = async () => {
      const out = await t.alice.callTool(run.runId, 'read', { path: 'bench.txt' });
      if (out.result.isError) throw new Error('read failed');
    };
    for (let i = 0; i < 200; i++) await once();
    const samples: number[] = [];
    for (let i = 0; i < n; i++) samples.push(await timeIt(once));
    await t.alice.deleteRun(run.runId);
    return samples;
  } finally {
    await t.close();
  }
}

async function main() {
  const echo = await echoBaseline(CALLS);
  const c = summary(await toolCalls(CALLS, true));
  const viaStdio = summary(await toolCalls(CALLS, false));
  const e = summary(echo);
  writeResult(`call-latency-${PROVIDER}${RUNTIME ? `-${RUNTIME}` : ''}`, {
    description: `sequential calls over loopback, ${CALLS} each, after 200 warm-up calls; fast path (runner socket) and stdio fallback`,
    provider: PROVIDER,
    runtime: RUNTIME || 'engine default',
    bareGrpcUnaryEchoMs: e,
    tetherReadCallMs: c,
    tetherReadCallStdioMs: viaStdio,
    overheadP50Ms: Math.round((c.p50 - e.p50) * 1000) / 1000,
    ratioP50: Math.round((c.p50 / e.p50) * 100) / 100,
    ratioP50Stdio: Math.round((viaStdio.p50 / e.p50) * 100) / 100,
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
