/**
 * A flooding tenant in its own process (so that its client's CPU is not charged to the
 * gateway under test): CallTool reads of one file until `seconds` have passed, either
 *  - `loops <n>`: n concurrent loops, each sending its next call when the last is answered
 *    (closed loop: n calls in flight), or
 *  - `rate <n>`: n calls a second whatever the answers (open loop), at most 2000 in flight.
 * Usage: node dist/bench/flood.js <address> <token> <runId> loops|rate <n> <seconds>;
 * prints JSON counts and rates.
 */
import { TetherClient } from '@tether/client';

const [address, token, runId, mode, nArg, seconds] = process.argv.slice(2);
const n = Number(nArg);
if (mode !== 'loops' && mode !== 'rate') throw new Error('mode: loops or rate');
const client = new TetherClient(address, token);
const began = performance.now();
let until = Date.now() + Number(seconds) * 1000;
// SIGTERM ends the flood early; the counts are still printed.
process.on('SIGTERM', () => (until = 0));
const counts = { answered: 0, refused: 0, refusedWithHint: 0, other: 0 };
let inFlight = 0;
const MAX_IN_FLIGHT = 2000;

const one = () => {
  inFlight++;
  return client.callTool(runId, 'read', { path: 'f.txt' }).then(
    () => {
      inFlight--;
      counts.answered++;
    },
    (e: { code?: number; metadata?: { get(k: string): unknown[] } }) => {
      inFlight--;
      if (e.code === 8) {
        counts.refused++;
        if (e.metadata?.get('retry-after-ms')[0]) counts.refusedWithHint++;
      } else counts.other++;
    },
  );
};

async function closedLoop(): Promise<void> {
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (Date.now() < until) await one();
    }),
  );
}

/** Sends on a 10 ms tick as many calls as the elapsed time owes, so a late tick catches up. */
async function openLoop(): Promise<void> {
  let sent = 0;
  await new Promise<void>((done) => {
    const tick = setInterval(() => {
      if (Date.now() >= until) {
        clearInterval(tick);
        return done();
      }
      const owed = Math.floor(((performance.now() - began) / 1000) * n) - sent;
      for (let i = 0; i < owed; i++, sent++) if (inFlight < MAX_IN_FLIGHT) void one();
    }, 10);
  });
  while (inFlight > 0) await new Promise((r) => setTimeout(r, 10));
}

(mode === 'loops' ? closedLoop() : openLoop()).then(() => {
  client.close();
  const s = (performance.now() - began) / 1000;
  const perSecond = (x: number) => Math.round(x / s);
  console.log(
    JSON.stringify({
      ...counts,
      seconds: Math.round(s * 10) / 10,
      attemptsPerSecond: perSecond(counts.answered + counts.refused + counts.other),
      refusedPerSecond: perSecond(counts.refused),
      answeredPerSecond: perSecond(counts.answered),
    }),
  );
});
