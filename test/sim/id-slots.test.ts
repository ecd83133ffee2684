import { test } from 'node:test';
import assert from 'node:assert/strict';
import { IdSlots } from '../../src/sim/id-slots.js';
import { Random } from '../../src/swarm/core/random.js';

test('id slots agree with a Map through seeded adds and deletes of ids far above 2^31', () => {
  for (const seed of [1, 2, 3]) {
    const random = new Random(seed);
    const slots = new IdSlots(4);
    const truth = new Map<number, number>();
    const live: number[] = [];
    for (let step = 0; step < 20_000; step++) {
      if (live.length > 0 && random.below(3) === 0) {
        const id = live.splice(random.below(live.length), 1)[0]!;
        assert.equal(slots.delete(id), truth.get(id), `seed ${seed} step ${step}`);
        truth.delete(id);
        assert.equal(slots.delete(id), -1, `seed ${seed}: deleted twice`);
      } else {
        // Core-like ids (generation * 2^21 + slot) and arbitrary safe integers.
        const id =
          random.below(2) === 0
            ? random.below(5000) * 2 ** 21 + random.below(64)
            : random.below(2 ** 32) * 2 ** 20 + random.below(2 ** 20);
        if (truth.has(id)) continue;
        slots.set(id, step);
        truth.set(id, step);
        live.push(id);
      }
      assert.equal(slots.size, truth.size, `seed ${seed} step ${step}`);
    }
    for (const [id, slot] of truth) assert.equal(slots.get(id), slot, `seed ${seed}: id ${id}`);
    assert.equal(slots.get(12345), -1);
    assert.throws(() => slots.set(live[0]!, 1), /invariant/);
    assert.throws(() => slots.set(-1, 1), /invariant/);
  }
});
