import { test } from 'node:test';
import assert from 'node:assert/strict';
import { endingCheck } from '../../src/swarm/agent/member.js';

const MiB = 1024 * 1024;

test('endingCheck: no byte yet, look again after one lead (the first byte also triggers a look)', () => {
  assert.equal(endingCheck(0, MiB, 40, 30), 30);
  assert.equal(endingCheck(0, MiB, 40, 1), 5, 'never sooner than the recheck floor');
});

test('endingCheck: a flow one lead from its end at its own rate is ending', () => {
  // 900 KiB in 90 ms: the last 124 KiB take ~12 ms, inside a 30 ms lead.
  assert.equal(endingCheck(900 * 1024, MiB, 90, 30), 'ending');
  assert.equal(endingCheck(MiB, MiB, 10, 30), 'ending', 'all bytes landed');
  // A fast flow: half the piece in 20 ms leaves ~20 ms.
  assert.equal(endingCheck(MiB / 2, MiB, 20, 30), 'ending');
});

test('endingCheck: a slow flow waits until one lead before its projected end, at most half the time left', () => {
  // An origin flow at 1 MiB/s: 100 KiB after 100 ms leaves ~924 ms; half of that is the wait.
  const wait = endingCheck(100 * 1024, MiB, 100, 30);
  assert.ok(Math.abs((wait as number) - 462) < 1, `waited ${String(wait)} ms`);
  // Near the end the lead decides: 800 KiB in 100 ms leaves 28 ms... ending; 700 KiB leaves ~46 ms.
  assert.equal(endingCheck(800 * 1024, MiB, 100, 30), 'ending');
  assert.ok(Math.abs((endingCheck(700 * 1024, MiB, 100, 30) as number) - 16.3) < 1);
});

test('endingCheck: bytes that ran for a few ms are a burst, not a rate', () => {
  // Half the piece 2 ms after its first byte would project 2 ms more; it looks again once the bytes
  // have run for 10 ms instead of announcing the end from a burst.
  assert.equal(endingCheck(MiB / 2, MiB, 2, 30), 8);
  assert.equal(endingCheck(MiB / 2, MiB, 8, 30), 5, 'never sooner than the recheck floor');
  assert.equal(endingCheck(MiB, MiB, 2, 30), 'ending', 'all bytes landed');
});
