import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Random } from '../../src/swarm/core/random.js';
import { RarityIndex } from '../../src/swarm/core/rarity.js';

/** Checks that `order` is sorted by copy count and that each bucket's bounds match. */
function checkBuckets(rarity: RarityIndex, model: number[], label: string): void {
  const seen = new Set<number>();
  let previous = -1;
  for (let i = 0; i < rarity.pieceCount; i++) {
    const piece = rarity.order[i]!;
    seen.add(piece);
    const copies = rarity.count[piece]!;
    assert.equal(copies, model[piece], `${label}: count of piece ${piece}`);
    assert.ok(copies >= previous, `${label}: order not sorted at ${i}`);
    previous = copies;
    assert.ok(
      rarity.bucketBegin(copies) <= i && i < rarity.bucketEnd(copies),
      `${label}: piece ${piece} outside its bucket`,
    );
  }
  assert.equal(seen.size, rarity.pieceCount, `${label}: order is not a permutation`);
  assert.equal(rarity.heldNowhere, model.filter((c) => c === 0).length, `${label}: heldNowhere`);
  assert.equal(rarity.heldSomewhere, model.filter((c) => c > 0).length, `${label}: heldSomewhere`);
}

test('random increments and decrements keep the buckets sorted (against a plain model)', () => {
  for (const seed of [1, 2, 3]) {
    const random = new Random(seed);
    const pieces = 57;
    const rarity = new RarityIndex(pieces, 20, random);
    const model = new Array<number>(pieces).fill(0);
    for (let step = 0; step < 5000; step++) {
      const piece = random.below(pieces);
      if (model[piece]! > 0 && (model[piece] === 20 || random.below(3) === 0)) {
        rarity.decrement(piece);
        model[piece]!--;
      } else {
        rarity.increment(piece);
        model[piece]!++;
      }
      if (step % 97 === 0) checkBuckets(rarity, model, `seed ${seed} step ${step}`);
    }
    checkBuckets(rarity, model, `seed ${seed} end`);
  }
});

test('the initial order is a seeded shuffle, not file order', () => {
  const orderOf = (seed: number): number[] => Array.from(new RarityIndex(40, 4, new Random(seed)).order);
  const fileOrder = Array.from({ length: 40 }, (_, i) => i);
  assert.notDeepEqual(orderOf(1), fileOrder);
  assert.notDeepEqual(orderOf(1), orderOf(2));
  assert.deepEqual(orderOf(3), orderOf(3));
});

test('counting past the host limit or below zero breaks an invariant', () => {
  const rarity = new RarityIndex(4, 1, new Random(1));
  assert.throws(() => rarity.decrement(0), /invariant/);
  rarity.increment(0);
  assert.throws(() => rarity.increment(0), /invariant/);
});
