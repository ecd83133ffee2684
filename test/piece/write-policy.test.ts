import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  INLINE_WRITE_BACKOFF_MS,
  INLINE_WRITE_BUSY_MAX,
  INLINE_WRITE_BYTES_MAX,
  writesInline,
} from '../../src/piece/write-policy.js';

test('a small piece is written on an idle loop; a busy loop or a large piece leaves it to the pool', () => {
  assert.equal(writesInline(0, 512 * 1024), true);
  assert.equal(writesInline(0.2, INLINE_WRITE_BYTES_MAX), true);
  assert.equal(writesInline(INLINE_WRITE_BUSY_MAX, 512 * 1024), false);
  assert.equal(writesInline(0.95, 64 * 1024), false);
  assert.equal(writesInline(0, INLINE_WRITE_BYTES_MAX + 1), false);
  assert.equal(writesInline(0, 16 * 1024 * 1024), false);
});

test('after an inline write that held the loop too long, writes go to the pool for a while', () => {
  assert.equal(writesInline(0, 512 * 1024, 0), false);
  assert.equal(writesInline(0, 512 * 1024, INLINE_WRITE_BACKOFF_MS - 1), false);
  assert.equal(writesInline(0, 512 * 1024, INLINE_WRITE_BACKOFF_MS), true);
  assert.equal(writesInline(0, 512 * 1024), true, 'no slow write yet');
});
