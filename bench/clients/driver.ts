/**
 * The TypeScript side of bench/clients.ts: one client process, as a platform's would be.
 * Usage: node dist/bench/clients/driver.js <address> <token> <runId> <rounds> <warm-up rounds>
 * Prints one JSON object: each contender's samples in milliseconds.
 */
import { TetherClient } from '../../clients/typescript/src';
import { CONTENDERS, HOVER, READ, type Samples } from './shape';

async function main() {
  const [address, token, runId, rounds, warm] = process.argv.slice(2);
  const shared = new TetherClient(address, token);
  const own = new TetherClient(address, token, { multiplex: false });
  const call = async (c: TetherClient, tool: string, args: object) => {
    const out = await c.callTool(runId, tool, args);
    if (out.result.isError) throw new Error(`${tool}: ${out.text}`);
  };
  const run: Record<(typeof CONTENDERS)[number], () => Promise<unknown>> = {
    health: () => shared.health(),
    readCalls: () => call(shared, 'read', READ),
    readCallTool: () => call(own, 'read', READ),
    hoverCalls: () => call(shared, 'lsp', HOVER),
    hoverCallTool: () => call(own, 'lsp', HOVER),
  };
  const samples = Object.fromEntries(CONTENDERS.map((k) => [k, [] as number[]])) as Samples;
  for (let i = -Number(warm); i < Number(rounds); i++) {
    for (const k of CONTENDERS) {
      const t0 = process.hrtime.bigint();
      await run[k]();
      if (i >= 0) samples[k].push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
  }
  shared.close();
  own.close();
  process.stdout.write(`${JSON.stringify(samples)}\n`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
