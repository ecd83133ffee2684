import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { LoopBusy } from '../../src/util/loop-busy.js';

/** Holds this thread for `ms` without yielding to the event loop. */
function holdLoop(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // spin
  }
}

test('the loop gauge reads near 1 after a window the loop was held, near 0 after one it waited', async () => {
  const gauge = new LoopBusy(50);
  assert.equal(gauge.busyShare(), 0, 'nothing measured before the first window ends');
  holdLoop(120);
  const held = gauge.busyShare();
  assert.ok(held > 0.8, `held: ${held}`);
  // Within the window just begun, the last completed window's share stands.
  assert.equal(gauge.busyShare(), held);
  await sleep(150);
  const idle = gauge.busyShare();
  assert.ok(idle < 0.3, `idle: ${idle}`);
});
