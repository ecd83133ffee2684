import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  backoffCeilingMs,
  isRetryableStatus,
  parseRetryAfterMs,
  retryDelayMs,
  type BackoffPolicy,
} from '../../src/origin/retry.js';

const policy: BackoffPolicy = { baseMs: 100, maxMs: 1000, retryAfterMaxMs: 5000 };
const nowMs = Date.UTC(2025, 0, 1, 12, 0, 0);

test('backoff ceiling doubles per attempt up to the maximum', () => {
  assert.deepEqual(
    [1, 2, 3, 4, 5, 6].map((attempt) => backoffCeilingMs(attempt, policy)),
    [100, 200, 400, 800, 1000, 1000],
  );
  assert.equal(backoffCeilingMs(10_000, policy), 1000);
  assert.equal(backoffCeilingMs(0, policy), 100);
});

test('full jitter scales the ceiling by the random number', () => {
  assert.equal(retryDelayMs({ attempt: 3, random: 0, nowMs }, policy), 0);
  assert.equal(retryDelayMs({ attempt: 3, random: 0.5, nowMs }, policy), 200);
  assert.equal(retryDelayMs({ attempt: 3, random: 0.999999, nowMs }, policy), 399);
  assert.equal(retryDelayMs({ attempt: 9, random: 0.25, nowMs }, policy), 250);
});

test('random numbers outside [0, 1) are clamped', () => {
  assert.equal(retryDelayMs({ attempt: 1, random: -1, nowMs }, policy), 0);
  assert.equal(retryDelayMs({ attempt: 1, random: Number.NaN, nowMs }, policy), 0);
  assert.equal(retryDelayMs({ attempt: 1, random: 7, nowMs }, policy), 99);
});

test('Retry-After in seconds is honoured and capped', () => {
  assert.equal(retryDelayMs({ attempt: 1, retryAfter: '2', random: 0.9, nowMs }, policy), 2000);
  assert.equal(retryDelayMs({ attempt: 1, retryAfter: '0', random: 0.9, nowMs }, policy), 0);
  assert.equal(retryDelayMs({ attempt: 1, retryAfter: '3600', random: 0.9, nowMs }, policy), 5000);
});

test('Retry-After as an HTTP date counts from the given time', () => {
  const inThreeSeconds = new Date(nowMs + 3000).toUTCString();
  assert.equal(parseRetryAfterMs(inThreeSeconds, nowMs), 3000);
  assert.equal(parseRetryAfterMs(new Date(nowMs - 60_000).toUTCString(), nowMs), 0);
  assert.equal(retryDelayMs({ attempt: 1, retryAfter: inThreeSeconds, random: 0, nowMs }, policy), 3000);
});

test('an unreadable Retry-After falls back to backoff', () => {
  for (const value of ['', 'soon', '-1', '1.5', '12abc']) {
    assert.equal(parseRetryAfterMs(value, nowMs), undefined, value);
  }
  assert.equal(retryDelayMs({ attempt: 2, retryAfter: 'soon', random: 0.5, nowMs }, policy), 100);
});

test('only "try later" statuses are retryable', () => {
  for (const status of [429, 408, 500, 502, 503, 504]) assert.ok(isRetryableStatus(status), String(status));
  for (const status of [400, 401, 403, 404, 416, 501])
    assert.equal(isRetryableStatus(status), false, String(status));
});

test('a retry budget cuts the last wait to what is left, then ends the retries', async () => {
  const { budgetedDelayMs } = await import('../../src/origin/retry.js');
  assert.equal(budgetedDelayMs(500, 0, 60_000), 500);
  assert.equal(budgetedDelayMs(5000, 58_000, 60_000), 2000);
  assert.equal(budgetedDelayMs(100, 60_000, 60_000), undefined);
  assert.equal(budgetedDelayMs(100, 61_000, 60_000), undefined);
  assert.equal(budgetedDelayMs(100, 0, 0), undefined);
});

test('before the origin ever answered, a call that cannot reach it has the first-contact budget', async () => {
  const { FIRST_CONTACT_BUDGET_MS, callBudgetMs } = await import('../../src/origin/retry.js');
  assert.equal(FIRST_CONTACT_BUDGET_MS, 3000);
  assert.equal(callBudgetMs(60_000, true), FIRST_CONTACT_BUDGET_MS);
  assert.equal(callBudgetMs(1000, true), 1000, 'a shorter outage budget is kept');
  assert.equal(callBudgetMs(60_000, false), 60_000);
});
