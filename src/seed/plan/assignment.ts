/**
 * The assignment problem, solved exactly: given an n x n cost matrix, a bijection rows -> columns of
 * least total cost. This is the Hungarian method in its O(n^3) shortest-augmenting-path form: rows
 * join one at a time; each join grows a tree of tight edges (reduced cost zero under the row and
 * column potentials), raising the potentials by the smallest slack until a free column is reached,
 * then flips the path. Costs here are piece counts, so every sum is an exact integer in a double.
 *
 * Ties: columns are scanned in index order and only a strictly smaller slack replaces the current
 * choice, so among equally cheap answers the result depends on the matrix alone.
 */

import { assert } from '../../errors.js';

/** Returns `columnOf[row]`, a permutation of 0..n-1 minimising the sum of `cost[row][columnOf[row]]`. */
export function solveAssignment(cost: readonly (readonly number[])[]): number[] {
  const n = cost.length;
  for (const row of cost) {
    assert(row.length === n, 'the assignment cost matrix must be square');
    for (const value of row) assert(Number.isFinite(value), 'assignment costs must be finite');
  }
  // Index 0 is a virtual column that holds the row being added; real rows and columns are 1..n.
  const rowPotential = new Float64Array(n + 1);
  const columnPotential = new Float64Array(n + 1);
  const rowOfColumn = new Int32Array(n + 1);
  const previousColumn = new Int32Array(n + 1);
  const slack = new Float64Array(n + 1);
  const inTree = new Uint8Array(n + 1);
  for (let row = 1; row <= n; row++) {
    rowOfColumn[0] = row;
    slack.fill(Number.POSITIVE_INFINITY);
    inTree.fill(0);
    let column = 0;
    do {
      inTree[column] = 1;
      const treeRow = rowOfColumn[column]!;
      const costs = cost[treeRow - 1]!;
      let delta = Number.POSITIVE_INFINITY;
      let nextColumn = 0;
      for (let j = 1; j <= n; j++) {
        if (inTree[j] === 1) continue;
        const reduced = costs[j - 1]! - rowPotential[treeRow]! - columnPotential[j]!;
        if (reduced < slack[j]!) {
          slack[j] = reduced;
          previousColumn[j] = column;
        }
        if (slack[j]! < delta) {
          delta = slack[j]!;
          nextColumn = j;
        }
      }
      for (let j = 0; j <= n; j++) {
        if (inTree[j] === 1) {
          rowPotential[rowOfColumn[j]!]! += delta;
          columnPotential[j]! -= delta;
        } else {
          slack[j]! -= delta;
        }
      }
      column = nextColumn;
    } while (rowOfColumn[column] !== 0);
    // Flip the augmenting path back to the virtual column.
    while (column !== 0) {
      const before = previousColumn[column]!;
      rowOfColumn[column] = rowOfColumn[before]!;
      column = before;
    }
  }
  const columnOf = new Array<number>(n).fill(-1);
  for (let j = 1; j <= n; j++) columnOf[rowOfColumn[j]! - 1] = j - 1;
  return columnOf;
}

/** The total cost of an assignment. */
export function assignmentCost(cost: readonly (readonly number[])[], columnOf: readonly number[]): number {
  let total = 0;
  columnOf.forEach((column, row) => (total += cost[row]![column]!));
  return total;
}
