import { test, mock } from 'node:test';
import assert from 'node:assert/strict';
import { InactivityTimer } from '../../../runner/src/tools/eval/inactivity';

test('expires after the budget of silence; activity starts the budget over', () => {
  mock.timers.enable({ apis: ['setTimeout'] });
  try {
    let fired = 0;
    const timer = new InactivityTimer(1000, () => fired++);
    mock.timers.tick(900);
    timer.touch();
    mock.timers.tick(900);
    assert.equal(fired, 0);
    mock.timers.tick(100);
    assert.equal(fired, 1);
  } finally {
    mock.timers.reset();
  }
});

test('paused while bridged calls are outstanding, resumed with a full budget when the last returns', () => {
  mock.timers.enable({ apis: ['setTimeout'] });
  try {
    let fired = 0;
    const timer = new InactivityTimer(1000, () => fired++);
    timer.pause();
    timer.pause();
    mock.timers.tick(5000);
    timer.resume();
    mock.timers.tick(5000);
    assert.equal(fired, 0, 'one call still outstanding');
    timer.resume();
    mock.timers.tick(999);
    assert.equal(fired, 0);
    mock.timers.tick(1);
    assert.equal(fired, 1);
    timer.stop();
  } finally {
    mock.timers.reset();
  }
});
