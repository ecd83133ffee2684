import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Random } from '../../src/swarm/core/random.js';

function draw(seed: number, count: number): number[] {
  const random = new Random(seed);
  return Array.from({ length: count }, () => random.nextU32());
}

test('the same seed gives the same sequence; different seeds differ', () => {
  for (const seed of [0, 1, 42, -7, 2 ** 40 + 3, 0.5]) {
    assert.deepEqual(draw(seed, 100), draw(seed, 100), `seed ${seed}`);
  }
  assert.notDeepEqual(draw(1, 20), draw(2, 20));
  assert.notDeepEqual(draw(0, 20), draw(2 ** 32, 20), 'high bits of the seed matter');
});

test('values are unsigned 32-bit integers and below(n) stays in range', () => {
  const random = new Random(3);
  for (let i = 0; i < 10_000; i++) {
    const value = random.nextU32();
    assert.ok(Number.isInteger(value) && value >= 0 && value < 2 ** 32);
    const n = 1 + (i % 17);
    const below = random.below(n);
    assert.ok(Number.isInteger(below) && below >= 0 && below < n, `below(${n}) gave ${below}`);
    const float = random.nextFloat();
    assert.ok(float >= 0 && float < 1);
  }
});

test('below(n) is close to uniform', () => {
  const seed = 11;
  const random = new Random(seed);
  const buckets = new Array<number>(10).fill(0);
  const draws = 100_000;
  for (let i = 0; i < draws; i++) buckets[random.below(10)]!++;
  for (const count of buckets) {
    assert.ok(
      Math.abs(count - draws / 10) < draws / 100,
      `seed ${seed}: bucket count ${count} far from uniform`,
    );
  }
});

test('shuffle permutes and depends on the seed', () => {
  const shuffled = (seed: number): number[] => {
    const values = Int32Array.from({ length: 50 }, (_, i) => i);
    new Random(seed).shuffle(values);
    return Array.from(values);
  };
  const a = shuffled(5);
  assert.deepEqual(
    [...a].sort((x, y) => x - y),
    Array.from({ length: 50 }, (_, i) => i),
  );
  assert.notDeepEqual(
    a,
    Array.from({ length: 50 }, (_, i) => i),
    'seed 5: shuffle left file order',
  );
  assert.notDeepEqual(a, shuffled(6));
});
