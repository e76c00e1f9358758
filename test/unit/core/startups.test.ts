import { test } from 'node:test';
import assert from 'node:assert/strict';
import { type StartupClock, StartingProcesses } from '../../../runner/src/startups';

/** A clock that moves only when told to. */
function fakeClock() {
  let now = 0;
  let timers: { at: number; fn: () => void }[] = [];
  const clock: StartupClock = {
    now: () => now,
    after(ms, fn) {
      const t = { at: now + ms, fn };
      timers.push(t);
      return () => {
        timers = timers.filter((x) => x !== t);
      };
    },
  };
  const advance = (ms: number) => {
    const until = now + ms;
    for (;;) {
      const due = timers.filter((t) => t.at <= until).sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      timers = timers.filter((t) => t !== due);
      now = due.at;
      due.fn();
    }
    now = until;
  };
  return { clock, advance, pending: () => timers.length };
}

/** Background work that logs what it is told and whether it is held now. */
function work() {
  const log: string[] = [];
  let depth = 0;
  return {
    log,
    held: () => depth > 0,
    w: {
      hold: () => {
        depth++;
        log.push('hold');
      },
      release: () => {
        depth--;
        log.push('release');
      },
    },
  };
}

test('background work is held from the first start to the last process up, once per stretch', () => {
  const { clock, advance } = fakeClock();
  const s = new StartingProcesses(15_000, clock);
  const bg = work();
  s.observe(bg.w);
  const pyright = s.begin('pyright');
  assert.ok(bg.held());
  advance(500);
  const gopls = s.begin('gopls');
  assert.deepEqual(s.holding, ['pyright', 'gopls']);
  advance(1000);
  pyright.end('diagnostics');
  assert.ok(bg.held(), 'gopls is still starting');
  advance(700);
  gopls.end('exited');
  assert.ok(!bg.held());
  assert.deepEqual(bg.log, ['hold', 'release']);
  assert.equal(s.holds, 1);
  assert.equal(s.heldMs, 2200);
  assert.deepEqual(
    s.history.map((r) => [r.name, r.began, r.ended, r.how]),
    [
      ['pyright', 0, 1500, 'diagnostics'],
      ['gopls', 500, 2200, 'exited'],
    ],
  );
  // Ending twice changes nothing.
  gopls.end('diagnostics');
  pyright.end('exited');
  assert.deepEqual(bg.log, ['hold', 'release']);
  assert.equal(s.history[1].how, 'exited');
});

test('a hold never outlasts the cap, and holds just after a capped one do not hold the work', () => {
  const { clock, advance, pending } = fakeClock();
  const s = new StartingProcesses(15_000, clock);
  const bg = work();
  s.observe(bg.w);
  const stuck = s.begin('stuck-server');
  advance(14_999);
  assert.ok(bg.held());
  advance(1);
  assert.ok(!bg.held(), 'released at the cap');
  assert.deepEqual(s.holding, []);
  assert.equal(s.history[0].how, 'cap');
  stuck.end('diagnostics'); // comes too late: nothing changes
  assert.equal(s.history[0].how, 'cap');
  assert.deepEqual(bg.log, ['hold', 'release']);

  // A server restarted at once (a start loop) does not hold the work again during the cooldown.
  advance(5_000);
  const again = s.begin('stuck-server');
  assert.ok(!bg.held());
  assert.equal(s.history[1].ignored, true);
  again.end('exited');
  assert.equal(s.history[1].how, 'exited');
  // After the cooldown, a start holds again.
  advance(10_000);
  const later = s.begin('pyright');
  assert.ok(bg.held());
  later.end('diagnostics');
  assert.ok(!bg.held());
  assert.equal(pending(), 0, 'no timer is left behind');
  assert.equal(s.holds, 2);
});

test('a stretch of overlapping starts is capped as a whole', () => {
  const { clock, advance } = fakeClock();
  const s = new StartingProcesses(15_000, clock);
  const bg = work();
  s.observe(bg.w);
  s.begin('a');
  advance(10_000);
  s.begin('b');
  advance(5_000);
  assert.ok(!bg.held(), 'b started within the stretch: the stretch still ends 15 s after it began');
  assert.deepEqual(
    s.history.map((r) => r.how),
    ['cap', 'cap'],
  );
});

test('work registered while something starts is held at once', () => {
  const { clock } = fakeClock();
  const s = new StartingProcesses(15_000, clock);
  const first = work();
  s.observe(first.w);
  const h = s.begin('pyright');
  const late = work();
  s.observe(late.w);
  assert.ok(first.held() && late.held());
  h.end('diagnostics');
  assert.ok(!first.held() && !late.held());
});

test('the history keeps the latest 20 holds', () => {
  const { clock, advance } = fakeClock();
  const s = new StartingProcesses(15_000, clock);
  for (let i = 0; i < 25; i++) {
    s.begin(`s${i}`).end('diagnostics');
    advance(1);
  }
  assert.equal(s.history.length, 20);
  assert.equal(s.history[0].name, 's5');
  assert.equal(s.holds, 25);
});
