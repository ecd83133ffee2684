import { test } from 'node:test';
import assert from 'node:assert/strict';
import { endingCheck } from '../../src/swarm/agent/member.js';

const MiB = 1024 * 1024;

test('endingCheck: no byte yet, look again after one lead', () => {
  assert.equal(endingCheck(0, MiB, 40, 30), 30);
  assert.equal(endingCheck(0, MiB, 40, 1), 5, 'never sooner than the recheck floor');
});

test('endingCheck: a flow one lead from its end at its own rate is ending', () => {
  // 900 KiB in 90 ms: the last 124 KiB take ~12 ms, inside a 30 ms lead.
  assert.equal(endingCheck(900 * 1024, MiB, 90, 30), 'ending');
  assert.equal(endingCheck(MiB, MiB, 10, 30), 'ending', 'all bytes landed');
});

test('endingCheck: a slow flow waits until one lead before its projected end', () => {
  // An origin flow at 1 MiB/s: 100 KiB after 100 ms leaves ~924 ms; look again ~30 ms before that.
  const wait = endingCheck(100 * 1024, MiB, 100, 30);
  assert.equal(typeof wait, 'number');
  assert.ok(Math.abs((wait as number) - (924 * 100) / 100 + 30) < 1, `waited ${String(wait)} ms`);
  // A fast flow earlier in its life: the same fraction in 10 ms projects ~92 ms more.
  assert.ok(Math.abs((endingCheck(100 * 1024, MiB, 10, 30) as number) - 62.4) < 1);
});
