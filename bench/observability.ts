/**
 * The cost of observability on a tool call: the same trivial call (read of a 1-line file)
 * through four gateways in one process — everything off, metrics, tracing (to an OTLP
 * receiver on loopback), and metrics + audit log + tracing — in interleaved rounds so the
 * shared machine's load falls on every variant alike; a second all-off gateway gives the
 * noise between identical gateways. Also the hook cost alone, per call (no I/O). With the
 * docker provider, an lsp hover (a warm pyright) is timed in the same rounds: under tracing
 * the runner measures its phases and returns them, so that is where their cost would show.
 * Usage: node dist/bench/observability.js [callsPerVariant] [provider]
 */
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Metrics } from '../gateway/src/observability/metrics';
import { Telemetry } from '../gateway/src/observability/Telemetry';
import { startTestGateway, type TestGateway } from '../test/helpers/gateway';
import { startOtlpReceiver } from '../test/helpers/otlp';
import { fixture } from '../test/integration/lsp/helpers';
import { summary, timeIt, writeResult } from './lib';

const CALLS = Number(process.argv[2] ?? 4000);
const PROVIDER = (process.argv[3] ?? 'process') as 'process' | 'docker';
const ROUND = 100;
/** Language servers are in the runner image; the process provider would need them on this host. */
const LSP = PROVIDER === 'docker';
const HOVER = { action: 'hover', file: 'geometry/main.py', line: 4, symbol: 'total_area' };

function hookCostNs(telemetry: Telemetry, n: number): number {
  const start = { runId: 'run-x', tool: 'read', callId: 'c', argumentsJson: '{"path":"bench.txt"}' };
  const began = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    const c = telemetry.call('alice', start, undefined);
    c.resolved('read', {});
    c.finish('ok');
  }
  return Number(process.hrtime.bigint() - began) / n;
}

async function main() {
  const otlp = await startOtlpReceiver();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tether-bench-audit-'));
  const tracing = { otlpEndpoint: otlp.url, serviceName: 'bench' };
  const variants: Record<string, Parameters<typeof startTestGateway>[0]> = {
    off: {},
    metrics: { metrics: { listen: '127.0.0.1:0' } },
    tracing: { tracing },
    all: { metrics: { listen: '127.0.0.1:0' }, audit: { path: path.join(dir, 'audit.jsonl') }, tracing },
    // A second gateway with everything off, created last: the spread between identical
    // gateways (their runner processes, their place in memory) is the noise floor.
    offAgain: {},
  };
  const gateways: Record<string, { t: TestGateway; once: () => Promise<void>; hover: () => Promise<void> }> = {};
  for (const [name, over] of Object.entries(variants)) {
    const t = await startTestGateway({ provider: PROVIDER, ...over });
    const run = await t.alice.createRun({ conversationId: 'bench', features: { lsp: LSP } });
    await t.alice.putFileMap(run.runId, { 'bench.txt': 'hello\n', ...(LSP ? fixture('py') : {}) });
    const once = async () => {
      const out = await t.alice.callTool(run.runId, 'read', { path: 'bench.txt' });
      if (out.result.isError) throw new Error('read failed');
    };
    const hover = async () => {
      const out = await t.alice.callTool(run.runId, 'lsp', HOVER, { deadlineMs: 120_000 });
      if (out.result.isError) throw new Error('hover failed');
    };
    for (let i = 0; i < 200; i++) await once();
    if (LSP) for (let i = 0; i < 20; i++) await hover();
    gateways[name] = { t, once, hover };
  }
  const samples: Record<string, number[]> = Object.fromEntries(Object.keys(variants).map((k) => [k, []]));
  const hovers: Record<string, number[]> = Object.fromEntries(Object.keys(variants).map((k) => [k, []]));
  const names = Object.keys(variants);
  for (let r = 0; r * ROUND < CALLS; r++) {
    // Rotate the order each round: no variant always runs first or last.
    for (let k = 0; k < names.length; k++) {
      const name = names[(r + k) % names.length];
      for (let i = 0; i < ROUND; i++) samples[name].push(await timeIt(gateways[name].once));
      if (LSP) for (let i = 0; i < ROUND / 4; i++) hovers[name].push(await timeIt(gateways[name].hover));
    }
  }
  for (const { t } of Object.values(gateways)) await t.close();
  await otlp.close();

  const off = summary(samples.off);
  const results: Record<string, unknown> = {
    description: `sequential read calls over loopback, ${CALLS} per variant in interleaved rounds of ${ROUND}, after 200 warm-up calls each; provider ${PROVIDER}`,
    provider: PROVIDER,
    spansExported: otlp.spans.length,
  };
  for (const name of names) {
    const s = summary(samples[name]);
    results[`${name}Ms`] = s;
    if (name !== 'off') results[`${name}OverP50Ms`] = Math.round((s.p50 - off.p50) * 1000) / 1000;
  }
  if (LSP) {
    const hoverOff = summary(hovers.off);
    const lsp: Record<string, unknown> = {
      description: `lsp hover on a warm pyright, ${hovers.off.length} per variant in the same rounds`,
    };
    for (const name of names) {
      const s = summary(hovers[name]);
      lsp[`${name}Ms`] = s;
      if (name !== 'off') lsp[`${name}OverP50Ms`] = Math.round((s.p50 - hoverOff.p50) * 1000) / 1000;
    }
    results.lspHover = lsp;
  }
  const n = 200_000;
  hookCostNs(Telemetry.off, 20_000);
  hookCostNs(new Telemetry(new Metrics({ defaults: false })), 20_000);
  results.hookCostPerCallNs = {
    off: Math.round(hookCostNs(Telemetry.off, n)),
    metrics: Math.round(hookCostNs(new Telemetry(new Metrics({ defaults: false })), n)),
  };
  writeResult(`observability-${PROVIDER}`, results);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
