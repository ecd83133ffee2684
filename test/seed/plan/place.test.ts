import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isWeightcastError } from '../../../src/errors.js';
import { placePieces, placeSnapshot, planDistribute, reportLayout } from '../../../src/seed/plan/index.js';
import { nodeName } from './helpers.js';

const names = (count: number): string[] => Array.from({ length: count }, (_, index) => nodeName(index));

test('round-robin placement: piece i on node i mod K, replicas on the next nodes', () => {
  const nodes = ['c', 'a', 'b', 'd'];
  const holders = placePieces([10, 10, 10, 10, 10, 7], nodes, { policy: 'round-robin', replicas: 1 });
  assert.deepEqual(holders, [
    ['c', 'a'],
    ['a', 'b'],
    ['b', 'd'],
    ['d', 'c'],
    ['c', 'a'],
    ['a', 'b'],
  ]);
});

test('balanced placement evens primaries and copies and never doubles a copy on one node', () => {
  for (const [nodeCount, pieceCount, replicas] of [
    [5, 103, 2],
    [25, 2240, 1],
    [3, 10, 2],
  ] as const) {
    const sizes = Array.from({ length: pieceCount }, (_, index) => (index === pieceCount - 1 ? 5 : 64));
    const holders = placePieces(sizes, names(nodeCount), { policy: 'balanced', replicas, seed: 9 });
    const primaries = new Map<string, number>();
    const copies = new Map<string, number>();
    for (const list of holders) {
      assert.equal(list.length, replicas + 1);
      assert.equal(new Set(list).size, list.length);
      primaries.set(list[0]!, (primaries.get(list[0]!) ?? 0) + 1);
      for (const name of list) copies.set(name, (copies.get(name) ?? 0) + 1);
    }
    const spread = (counts: Map<string, number>): number =>
      Math.max(...counts.values()) - Math.min(...counts.values());
    assert.equal(primaries.size, nodeCount);
    assert.ok(spread(primaries) <= 1, `primaries ${[...primaries.values()].join(',')}`);
    assert.ok(spread(copies) <= 2, `copies ${[...copies.values()].join(',')}`);
    assert.deepEqual(
      placePieces(sizes, names(nodeCount), { policy: 'balanced', replicas, seed: 9 }),
      holders,
    );
  }
});

test('placement refuses more copies than nodes, and bad options, with typed errors', () => {
  assert.throws(
    () => placePieces([1, 2], ['a', 'b'], { policy: 'round-robin', replicas: 2 }),
    (error) => isWeightcastError(error, 'SEED_PLACEMENT_IMPOSSIBLE'),
  );
  assert.throws(
    () => placePieces([1], ['a', 'a'], { policy: 'balanced', replicas: 0 }),
    (error) => isWeightcastError(error, 'SEED_PLAN_INVALID'),
  );
  assert.throws(
    () => placePieces([1], ['a'], { policy: 'balanced', replicas: -1 }),
    (error) => isWeightcastError(error, 'SEED_PLAN_INVALID'),
  );
});

test('a fresh put layout is already what distribute wants: no moves', () => {
  const nodes = names(6).map((name, index) => ({ name, active: index !== 2 }));
  const sizes = Array.from({ length: 53 }, () => 100);
  const roundRobin = placeSnapshot('m', nodes, sizes, { policy: 'round-robin', replicas: 2 });
  for (const piece of roundRobin.pieces)
    assert.ok(!piece.holders.includes(nodeName(2)), 'inactive nodes get nothing');
  assert.equal(planDistribute(roundRobin, { mode: 'round-robin' }).moves.length, 0);
  assert.equal(planDistribute(roundRobin, { mode: 'primary' }).moves.length, 0);
  const balanced = placeSnapshot('m', nodes, sizes, { policy: 'balanced', replicas: 1, seed: 4 });
  assert.equal(planDistribute(balanced, { mode: 'primary' }).moves.length, 0);
  const report = reportLayout(roundRobin);
  assert.equal(report.windows[0]!.distinctNodesMin, 5, 'every window of 8 uses all 5 active nodes');
});
