/** Seeded catalog snapshots for the planner's tests, and the invariants every plan must keep. */

import assert from 'node:assert/strict';
import { Random } from '../../../src/swarm/core/random.js';
import {
  applyMoves,
  type CatalogSnapshot,
  type DistributeOptions,
  type DistributePlan,
  type PieceHolding,
  type SeedNode,
} from '../../../src/seed/plan/index.js';

export interface RandomSnapshotOptions {
  nodes: number;
  pieces: number;
  /** Each piece gets 0..replicasMax replicas (its own count). */
  replicasMax: number;
  inactive?: number;
  /** Copies land only on the first `hot` nodes when set (the "5 of 25" story). */
  hot?: number;
}

export function nodeName(index: number): string {
  return `node-${String(index).padStart(3, '0')}`;
}

export function randomSnapshot(seed: number, options: RandomSnapshotOptions): CatalogSnapshot {
  const random = new Random(seed);
  const nodes: SeedNode[] = [];
  for (let index = 0; index < options.nodes; index++) {
    nodes.push({ name: nodeName(index), active: index >= (options.inactive ?? 0) });
  }
  const pool = options.hot ?? options.nodes;
  const pieces: PieceHolding[] = [];
  for (let index = 0; index < options.pieces; index++) {
    const copies = 1 + random.below(Math.min(options.replicasMax, pool - 1) + 1);
    const holders: string[] = [];
    while (holders.length < copies) {
      const name = nodeName(random.below(pool));
      if (!holders.includes(name)) holders.push(name);
    }
    const sizeBytes = index === options.pieces - 1 ? 1000 + random.below(4096) : 4096;
    pieces.push({ index, sizeBytes, holders, version: 1 + random.below(5) });
  }
  return { model: `sha256:test-${seed}`, nodes, pieces };
}

/** The same snapshot with nodes, pieces and replica order shuffled, held in a Map and a Set. */
export function shuffledSnapshot(snapshot: CatalogSnapshot, seed: number): CatalogSnapshot {
  const random = new Random(seed);
  const shuffle = <T>(items: T[]): T[] => {
    for (let i = items.length - 1; i > 0; i--) {
      const j = random.below(i + 1);
      [items[i], items[j]] = [items[j]!, items[i]!];
    }
    return items;
  };
  const pieces = shuffle([...snapshot.pieces]).map((piece) => ({
    ...piece,
    holders: [piece.holders[0]!, ...shuffle(piece.holders.slice(1))],
  }));
  const byIndex = new Map(pieces.map((piece) => [piece.index, piece]));
  return {
    model: snapshot.model,
    nodes: new Set(shuffle([...snapshot.nodes])),
    pieces: { [Symbol.iterator]: () => byIndex.values() },
  };
}

function countsWithin(values: number[], total: number, what: string): void {
  const floor = Math.floor(total / values.length);
  const ceil = Math.ceil(total / values.length);
  for (const value of values) assert.ok(value >= floor && value <= ceil, `${what}: ${values.join(',')}`);
}

/** Checks what every plan must keep, and what its mode promises. */
export function checkPlan(snapshot: CatalogSnapshot, plan: DistributePlan, options: DistributeOptions): void {
  const before = [...snapshot.pieces].sort((a, b) => a.index - b.index);
  const after = applyMoves(snapshot, plan.moves);
  assert.deepEqual(after, plan.afterPieces, 'the moves, applied as the catalog commits them, give the plan');
  const targets = new Set(plan.targetNodes);
  if (options.nodes !== undefined) assert.equal(targets.size, options.nodes);
  const inactive = new Set([...snapshot.nodes].filter((node) => !node.active).map((node) => node.name));
  const primaries = new Map([...targets].map((name) => [name, 0]));
  const copies = new Map([...targets].map((name) => [name, 0]));
  let totalCopies = 0;
  after.forEach((piece, index) => {
    assert.equal(new Set(piece.holders).size, piece.holders.length, `piece ${index}: two copies on one node`);
    assert.equal(piece.holders.length, before[index]!.holders.length, `piece ${index}: copy count changed`);
    for (const holder of piece.holders) {
      assert.ok(targets.has(holder), `piece ${index} left on ${holder}, not a target`);
      assert.ok(!inactive.has(holder), `piece ${index} left on inactive ${holder}`);
      copies.set(holder, copies.get(holder)! + 1);
    }
    primaries.set(piece.holders[0]!, primaries.get(piece.holders[0]!)! + 1);
    totalCopies += piece.holders.length;
    if (options.mode === 'round-robin') {
      assert.equal(
        piece.holders[0],
        plan.rotation!.nodes[index % targets.size],
        `piece ${index} off its rotation`,
      );
    }
  });
  if (options.mode === 'round-robin') {
    assert.deepEqual([...plan.rotation!.nodes].sort(), [...targets].sort(), 'the rotation is a bijection');
  }
  countsWithin([...primaries.values()], after.length, 'primaries per node');
  if (options.mode === 'replica') countsWithin([...copies.values()], totalCopies, 'copies per node');
}
