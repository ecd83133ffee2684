import { test } from 'node:test';
import assert from 'node:assert/strict';
import { IntSet } from '../../src/swarm/core/int-set.js';
import { Random } from '../../src/swarm/core/random.js';

test('add, delete, has, pop and growth', () => {
  const set = new IntSet(2);
  set.add(5);
  set.add(1);
  set.add(5);
  set.add(100);
  assert.equal(set.size, 3);
  assert.ok(set.has(5) && set.has(1) && set.has(100));
  assert.equal(set.has(2), false);
  assert.equal(set.has(10_000), false);
  set.delete(1);
  set.delete(1);
  set.delete(10_000);
  assert.equal(set.size, 2);
  assert.equal(set.has(1), false);
  const popped = [set.pop(), set.pop()].sort((a, b) => a - b);
  assert.deepEqual(popped, [5, 100]);
  assert.equal(set.size, 0);
  set.add(3);
  set.add(4);
  set.clear();
  assert.equal(set.size, 0);
  assert.equal(set.has(3), false);
});

test('random picks only members and reaches all of them', () => {
  const seed = 9;
  const random = new Random(seed);
  const set = new IntSet(8);
  for (const value of [2, 4, 6, 8]) set.add(value);
  const seen = new Set<number>();
  for (let i = 0; i < 200; i++) seen.add(set.random(random));
  assert.deepEqual(
    [...seen].sort((a, b) => a - b),
    [2, 4, 6, 8],
    `seed ${seed}`,
  );
});
