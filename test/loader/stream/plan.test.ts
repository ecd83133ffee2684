import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ArenaAllocator } from '../../../src/loader/stream/arena.js';
import { planReads } from '../../../src/loader/stream/plan.js';
import type { ReadRequest } from '../../../src/loader/stream/types.js';
import { isWeightcastError } from '../../../src/errors.js';

const P = 100;
const digests = (size: number): string[] => Array.from({ length: Math.ceil(size / P) }, (_, i) => `d${i}`);
const tensor = (start: number, end: number): ReadRequest<string> => ({
  file: 'a',
  ranges: [{ start, end }],
  tag: `t${start}`,
});

test('with digests every piece is read exactly once, and heads are copied from the group before', () => {
  const size = 1000;
  const requests = [tensor(40, 250), tensor(250, 620), tensor(620, 650), tensor(650, 1000)];
  const plan = planReads([{ path: 'a', size, pieces: digests(size) }], requests, {
    pieceSize: P,
    groupBytes: 400,
    readBytes: 64,
    gapBytesMax: P,
  });
  const groups = plan.files[0] ?? [];
  const pieces = groups.flatMap((g) => g.pieces.map((p) => p.index));
  assert.deepEqual(pieces, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  for (const group of groups) {
    const read = group.reads.reduce((sum, r) => sum + r.length, 0);
    assert.equal(read, group.bufEnd - group.bufStart - group.headBytes);
    for (const item of group.items) {
      for (const fragment of item.fragments)
        assert.ok(fragment.offset + fragment.length <= group.bufEnd - group.bufStart);
    }
  }
  assert.equal(groups[0]?.bufStart, 0);
  assert.equal(groups[1]?.headBytes, 300 - 250);
  // [620, 650) lies inside the piece the previous group already holds: it joins that group.
  assert.equal(groups.length, 3);
  assert.equal(plan.bytesToRead, size);
});

test('without digests groups hold exactly the requested bytes', () => {
  const plan = planReads([{ path: 'a', size: 1000 }], [tensor(8, 20), tensor(20, 700)], {
    groupBytes: 10,
    readBytes: 300,
    gapBytesMax: 0,
  });
  const groups = plan.files[0] ?? [];
  assert.deepEqual(
    groups.map((g) => [g.bufStart, g.bufEnd, g.reads.length]),
    [
      [8, 20, 1],
      [20, 700, 3],
    ],
  );
  assert.equal(plan.bytesToRead, 692);
});

test('overlapping or out-of-file requests are refused with a typed error', () => {
  const options = { groupBytes: 10, readBytes: 10, gapBytesMax: 0 };
  assert.throws(
    () => planReads([{ path: 'a', size: 100 }], [tensor(0, 50), tensor(40, 60)], options),
    (error) => isWeightcastError(error, 'LOADER_INVALID_REQUEST'),
  );
  assert.throws(
    () => planReads([{ path: 'a', size: 100 }], [tensor(90, 120)], options),
    (error) => isWeightcastError(error, 'LOADER_INVALID_REQUEST'),
  );
});

test('the arena hands out first fit and merges freed neighbours', () => {
  const arena = new ArenaAllocator(100);
  const a = arena.allocate(30);
  const b = arena.allocate(30);
  const c = arena.allocate(30);
  assert.deepEqual([a, b, c], [0, 30, 60]);
  assert.equal(arena.allocate(20), undefined);
  arena.free(30, 30);
  assert.equal(arena.allocate(40), undefined);
  arena.free(0, 30);
  assert.equal(arena.largestHole(), 60);
  arena.free(60, 30);
  assert.equal(arena.largestHole(), 100);
  assert.equal(arena.used, 0);
});
