/**
 * The same trivial tool call (`read` of a 1-line file, one run) through each way into the
 * gateway, in interleaved blocks so the machine's load falls on every path alike:
 * - gRPC, the TypeScript client's `callTool` on its shared Calls stream (the baseline);
 * - gRPC, InvokeTool (unary) through the same client: the call's shape without the stream;
 * - Connect, InvokeTool as plain JSON over HTTP/1.1 with Node's fetch (keep-alive);
 * - Connect, InvokeTool through connect-node's client over HTTP/2 (JSON).
 * N calls per path per repeat, R repeats; p50 and p90 per repeat, their median and spread, and
 * each path's p50 over the baseline's in the same repeat.
 * Usage: node dist/bench/connect.js [calls] [repeats] [provider]
 */
import { createClient } from '@connectrpc/connect';
import { createConnectTransport, Http2SessionManager } from '@connectrpc/connect-node';
import { Gateway } from '@tether/contract';
import { startTestGateway } from '../test/helpers/gateway';
import { percentile, summary, timeIt, writeResult } from './lib';

const CALLS = Number(process.argv[2] ?? 2000);
const REPEATS = Number(process.argv[3] ?? 5);
const PROVIDER = (process.argv[4] ?? 'process') as 'process' | 'docker';
const WARMUP = 200;
/** Calls per block: each repeat runs its calls of every path in blocks this long, in turn. */
const BLOCK = 100;

const r3 = (x: number) => Math.round(x * 1000) / 1000;
const spread = (xs: number[]) => ({
  median: r3(percentile(xs, 50)),
  min: r3(Math.min(...xs)),
  max: r3(Math.max(...xs)),
});

async function main() {
  const base = await import('../gateway/src/config').then((m) => m.defaultConfig().docker);
  const t = await startTestGateway({
    provider: PROVIDER,
    http: { listen: '127.0.0.1:0' },
    // Back-to-back calls over a few seconds pass the default rate limit; it is not what is measured.
    tenancy: { default: { callTool: { perSecond: 1_000_000, burst: 1_000_000 } } },
    docker: { ...base, image: process.env.TETHER_IMAGE || base.image },
  });
  const url = `http://${t.gateway.httpAddress}`;
  const sessions = new Http2SessionManager(url);
  const h2 = createClient(
    Gateway,
    createConnectTransport({
      baseUrl: url,
      httpVersion: '2',
      sessionManager: sessions,
      interceptors: [
        (next) => (req) => {
          req.header.set('authorization', 'Bearer token-alice');
          return next(req);
        },
      ],
    }),
  );
  try {
    const run = await t.alice.createRun({ conversationId: 'bench-connect' });
    await t.alice.putFileMap(run.runId, { 'bench.txt': 'hello\n' });
    const args = JSON.stringify({ path: 'bench.txt' });
    const body = JSON.stringify({ runId: run.runId, tool: 'read', argumentsJson: args });
    const headers = { authorization: 'Bearer token-alice', 'content-type': 'application/json' };
    const check = (isError: boolean) => {
      if (isError) throw new Error('read failed');
    };
    const paths: Record<string, () => Promise<void>> = {
      grpcCallTool: async () => check((await t.alice.callTool(run.runId, 'read', { path: 'bench.txt' })).isError),
      grpcInvokeTool: async () => check((await t.alice.invokeTool(run.runId, 'read', { path: 'bench.txt' })).isError),
      connectJsonHttp1: async () => {
        const res = await fetch(`${url}/tether.v1.Gateway/InvokeTool`, { method: 'POST', headers, body });
        if (res.status !== 200) throw new Error(`InvokeTool answered ${res.status}`);
        check(((await res.json()) as { isError: boolean }).isError);
      },
      connectHttp2: async () =>
        check((await h2.invokeTool({ runId: run.runId, tool: 'read', argumentsJson: args })).isError),
    };
    const names = Object.keys(paths);
    for (const name of names) for (let i = 0; i < WARMUP; i++) await paths[name]();

    const loadBefore = (await import('node:os')).loadavg();
    const perRepeat: Record<string, { p50: number; p90: number }[]> = Object.fromEntries(names.map((n) => [n, []]));
    const all: Record<string, number[]> = Object.fromEntries(names.map((n) => [n, []]));
    for (let r = 0; r < REPEATS; r++) {
      const samples: Record<string, number[]> = Object.fromEntries(names.map((n) => [n, []]));
      for (let b = 0; b * BLOCK < CALLS; b++) {
        // Rotate the order each block: no path always runs first or last.
        for (let k = 0; k < names.length; k++) {
          const name = names[(b + k) % names.length];
          for (let i = 0; i < Math.min(BLOCK, CALLS - b * BLOCK); i++) samples[name].push(await timeIt(paths[name]));
        }
      }
      for (const name of names) {
        perRepeat[name].push({ p50: percentile(samples[name], 50), p90: percentile(samples[name], 90) });
        all[name].push(...samples[name]);
      }
      console.error(
        `repeat ${r + 1}/${REPEATS}: ${names.map((n) => `${n} p50 ${r3(percentile(samples[n], 50))} ms`).join(', ')}`,
      );
    }
    const loadAfter = (await import('node:os')).loadavg();
    const ratio = (name: string) =>
      spread(
        perRepeat[name].map((s, i) => s.p50 / perRepeat.grpcCallTool[i].p50).map((x) => Math.round(x * 100) / 100),
      );
    writeResult(`connect-${PROVIDER}`, {
      description: `a trivial read, one run, ${CALLS} sequential calls per path per repeat in interleaved blocks of ${BLOCK}, ${REPEATS} repeats, after ${WARMUP} warm-up calls per path`,
      provider: PROVIDER,
      loadAverage: { before: loadBefore.map(r3), after: loadAfter.map(r3) },
      paths: Object.fromEntries(
        names.map((n) => [
          n,
          {
            p50Ms: spread(perRepeat[n].map((s) => s.p50)),
            p90Ms: spread(perRepeat[n].map((s) => s.p90)),
            allCallsMs: summary(all[n]),
            p50OverGrpcCallTool: ratio(n),
          },
        ]),
      ),
    });
    await t.alice.deleteRun(run.runId);
  } finally {
    sessions.abort();
    await t.close();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
