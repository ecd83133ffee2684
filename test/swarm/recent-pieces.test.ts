import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  RECENT_BYTES_MAX,
  RECENT_BYTES_MIN,
  RecentBudget,
  RecentPieces,
  recentBytesFor,
} from '../../src/swarm/agent/recent-pieces.js';

const PIECE = 16;

/** A run's buffer: piece p's bytes are all p, in a buffer with `spare` bytes past the run. */
function runBuffer(first: number, pieces: number, lastLength = PIECE, spare = 0): Buffer {
  const length = (pieces - 1) * PIECE + lastLength;
  const buffer = Buffer.alloc(length + spare, 0xee);
  for (let i = 0; i < pieces; i++) buffer.fill(first + i, i * PIECE, Math.min(length, (i + 1) * PIECE));
  return buffer;
}

function cache(
  budgetBytes: number,
  budget = new RecentBudget(budgetBytes),
): { recent: RecentPieces; recycled: Buffer[]; budget: RecentBudget } {
  const recycled: Buffer[] = [];
  const recent = new RecentPieces({ budget, pieceSize: PIECE, recycle: (b) => recycled.push(b) });
  return { recent, recycled, budget };
}

describe('RecentPieces', () => {
  it('lends views of kept runs, within one run only, never past the run', () => {
    const { recent } = cache(1024);
    const run = runBuffer(4, 3, 10, 32);
    recent.keep(4, 3, run, 2 * PIECE + 10);
    const whole = recent.borrow(4, 0, 2 * PIECE + 10);
    assert.ok(whole !== undefined);
    assert.deepEqual([...whole.bytes], [...run.subarray(0, 2 * PIECE + 10)]);
    const middle = recent.borrow(5, 3, PIECE);
    assert.deepEqual([...(middle?.bytes ?? [])], [...Buffer.alloc(PIECE - 3, 5), 6, 6, 6]);
    // Past the run's last byte (into the buffer's spare bytes), before it, and pieces not kept.
    assert.equal(recent.borrow(6, 0, 11), undefined);
    assert.equal(recent.borrow(6, 5, 6), undefined);
    assert.equal(recent.borrow(4, -1, 4), undefined);
    assert.equal(recent.borrow(3, 0, 4), undefined);
    assert.equal(recent.borrow(7, 0, 4), undefined);
    assert.equal(recent.borrow(4, 0, 0), undefined);
    assert.equal(recent.lent, 2);
    whole.release(true);
    middle?.release(true);
  });

  it('evicts the oldest runs past its budget and recycles their buffers', () => {
    const { recent, recycled } = cache(3 * PIECE);
    const a = runBuffer(0, 1);
    const b = runBuffer(1, 1);
    const c = runBuffer(2, 1);
    const d = runBuffer(3, 1);
    recent.keep(0, 1, a, PIECE);
    recent.keep(1, 1, b, PIECE);
    recent.keep(2, 1, c, PIECE);
    assert.deepEqual(recycled, []);
    recent.keep(3, 1, d, PIECE);
    assert.deepEqual(recycled, [a]);
    assert.equal(recent.borrow(0, 0, PIECE), undefined);
    assert.equal(recent.bytes, 3 * PIECE);
    // A buffer larger than the whole budget is not kept.
    const huge = runBuffer(9, 4);
    recent.keep(9, 4, huge, 4 * PIECE);
    assert.deepEqual(recycled, [a, huge]);
    recent.clear();
    assert.deepEqual(recycled, [a, huge, b, c, d]);
    assert.equal(recent.bytes, 0);
  });

  it('recycles a lent run only once its upload gives it back, and never one whose write did not complete', () => {
    const { recent, recycled } = cache(2 * PIECE);
    const a = runBuffer(0, 1);
    const b = runBuffer(1, 1);
    recent.keep(0, 1, a, PIECE);
    recent.keep(1, 1, b, PIECE);
    const lentA = recent.borrow(0, 0, PIECE);
    const lentB = recent.borrow(1, 0, PIECE);
    recent.keep(2, 1, runBuffer(2, 1), PIECE);
    recent.keep(3, 1, runBuffer(3, 1), PIECE);
    // Both evicted while lent: neither may be reused yet.
    assert.deepEqual(recycled, []);
    assert.equal(recent.borrow(0, 0, PIECE), undefined);
    lentA?.release(true);
    lentA?.release(true);
    assert.deepEqual(recycled, [a]);
    // The socket closed with B's bytes queued: B is left to the garbage collector.
    lentB?.release(false);
    assert.deepEqual(recycled, [a]);
  });

  it('replaces the runs holding a piece kept again, and keeps a lent one out of reuse', () => {
    const { recent, recycled } = cache(1024);
    const pair = runBuffer(0, 2);
    recent.keep(0, 2, pair, 2 * PIECE);
    const lent = recent.borrow(1, 0, PIECE);
    const again = runBuffer(1, 1);
    recent.keep(1, 1, again, PIECE);
    assert.equal(recent.borrow(0, 0, PIECE), undefined, 'the older run is gone whole');
    assert.deepEqual(recycled, []);
    assert.deepEqual([...(recent.borrow(1, 0, PIECE)?.bytes ?? [])], [...again]);
    lent?.release(true);
    assert.deepEqual(recycled, [pair]);
  });

  it("shares one budget among an agent's models: the oldest run of any model goes first", () => {
    const budget = new RecentBudget(3 * PIECE);
    const one = cache(0, budget);
    const two = cache(0, budget);
    const a = runBuffer(0, 1);
    const b = runBuffer(0, 1);
    const c = runBuffer(1, 1);
    const d = runBuffer(1, 1);
    one.recent.keep(0, 1, a, PIECE);
    two.recent.keep(0, 1, b, PIECE);
    one.recent.keep(1, 1, c, PIECE);
    assert.equal(budget.bytes, 3 * PIECE);
    // The second model's new run pushes out the first model's oldest.
    two.recent.keep(1, 1, d, PIECE);
    assert.deepEqual(one.recycled, [a]);
    assert.deepEqual(two.recycled, []);
    assert.equal(one.recent.borrow(0, 0, PIECE), undefined);
    assert.equal(one.recent.bytes + two.recent.bytes, budget.bytes);
    // A model that closes gives its share back.
    two.recent.clear();
    assert.equal(budget.bytes, PIECE);
    assert.deepEqual(two.recycled, [b, d]);
  });

  it('asks for 32 pieces of memory, within 16 and 256 MiB, and a budget only grows', () => {
    const MiB = 1024 * 1024;
    assert.equal(recentBytesFor(512 * 1024), RECENT_BYTES_MIN);
    assert.equal(recentBytesFor(2 * MiB), 64 * MiB);
    assert.equal(recentBytesFor(16 * MiB), RECENT_BYTES_MAX);
    const budget = new RecentBudget();
    budget.raise(recentBytesFor(2 * MiB));
    budget.raise(recentBytesFor(512 * 1024));
    assert.equal(budget.bytesMax, 64 * MiB);
  });
});
