/**
 * A flooding tenant in its own process (so that its client's CPU is not charged to the
 * gateway under test): `loops` concurrent CallTool reads until `seconds` have passed.
 * Usage: node dist/bench/flood.js <address> <token> <runId> <loops> <seconds>; prints JSON counts.
 */
import { TetherClient } from '../gateway/src/client';

const [address, token, runId, loops, seconds] = process.argv.slice(2);
const client = new TetherClient(address, token);
let until = Date.now() + Number(seconds) * 1000;
// SIGTERM ends the flood early; the counts are still printed.
process.on('SIGTERM', () => (until = 0));
const counts = { answered: 0, refused: 0, other: 0 };

Promise.all(
  Array.from({ length: Number(loops) }, async () => {
    while (Date.now() < until) {
      await client.callTool(runId, 'read', { path: 'f.txt' }).then(
        () => counts.answered++,
        (e: { code?: number }) => (e.code === 8 ? counts.refused++ : counts.other++),
      );
    }
  }),
).then(() => {
  client.close();
  console.log(JSON.stringify(counts));
});
