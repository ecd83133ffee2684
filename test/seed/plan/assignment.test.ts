import { test } from 'node:test';
import assert from 'node:assert/strict';
import { assignmentCost, solveAssignment } from '../../../src/seed/plan/assignment.js';
import { Random } from '../../../src/swarm/core/random.js';

function permutations(n: number): number[][] {
  if (n === 0) return [[]];
  return permutations(n - 1).flatMap((rest) =>
    Array.from({ length: n }, (_, at) => [...rest.slice(0, at), n - 1, ...rest.slice(at)]),
  );
}

test('the assignment solver finds the least total cost (brute force over every permutation, n <= 7)', () => {
  const random = new Random(7);
  for (let trial = 0; trial < 300; trial++) {
    const n = 1 + random.below(7);
    // Small value ranges force many ties.
    const range = 1 + random.below(trial % 2 === 0 ? 3 : 50);
    const cost = Array.from({ length: n }, () => Array.from({ length: n }, () => random.below(range)));
    const columnOf = solveAssignment(cost);
    assert.deepEqual(
      [...columnOf].sort((a, b) => a - b),
      [...Array(n).keys()],
      `trial ${trial}: not a permutation`,
    );
    const best = Math.min(...permutations(n).map((perm) => assignmentCost(cost, perm)));
    assert.equal(assignmentCost(cost, columnOf), best, `trial ${trial}: ${JSON.stringify(cost)}`);
    assert.deepEqual(solveAssignment(cost), columnOf, 'the same matrix gives the same answer');
  }
});

test('the assignment solver handles the empty matrix and a 200 x 200 one quickly', () => {
  assert.deepEqual(solveAssignment([]), []);
  const random = new Random(3);
  const n = 200;
  const cost = Array.from({ length: n }, () => Array.from({ length: n }, () => random.below(1000)));
  const columnOf = solveAssignment(cost);
  assert.equal(new Set(columnOf).size, n);
  // Optimality check by complementary slackness is implicit; at least it beats the identity.
  assert.ok(assignmentCost(cost, columnOf) <= assignmentCost(cost, [...Array(n).keys()]));
});
