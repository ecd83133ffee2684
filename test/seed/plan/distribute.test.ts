import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isWeightcastError } from '../../../src/errors.js';
import {
  DISTRIBUTE_MODES,
  applyMoves,
  placeSnapshot,
  planDistribute,
  renderPlanJson,
  renderPlanText,
  type CatalogSnapshot,
  type DistributeOptions,
} from '../../../src/seed/plan/index.js';
import { Random } from '../../../src/swarm/core/random.js';
import {
  checkPlan,
  nodeName,
  randomSnapshot,
  shuffledSnapshot,
  type RandomSnapshotOptions,
} from './helpers.js';

const SHAPES: RandomSnapshotOptions[] = [
  { nodes: 5, pieces: 40, replicasMax: 0 },
  { nodes: 6, pieces: 61, replicasMax: 2 },
  { nodes: 8, pieces: 200, replicasMax: 1, hot: 3 },
  { nodes: 7, pieces: 90, replicasMax: 2, inactive: 2 },
  { nodes: 4, pieces: 9, replicasMax: 3 },
  { nodes: 25, pieces: 500, replicasMax: 1, hot: 5, inactive: 1 },
  { nodes: 3, pieces: 2, replicasMax: 1 },
  { nodes: 2, pieces: 14, replicasMax: 1 },
  { nodes: 3, pieces: 30, replicasMax: 2 },
];

function planAndCheck(snapshot: CatalogSnapshot, options: DistributeOptions, label: string): void {
  const plan = planDistribute(snapshot, options);
  try {
    checkPlan(snapshot, plan, options);
  } catch (error) {
    assert.fail(`${label} ${JSON.stringify(options)}: ${(error as Error).message}`);
  }
}

test('every mode keeps its invariants on seeded random layouts (replicas, inactive nodes, hot spots)', () => {
  SHAPES.forEach((shape, index) => {
    for (let seed = 1; seed <= 6; seed++) {
      const snapshot = randomSnapshot(seed * 100 + index, shape);
      for (const mode of DISTRIBUTE_MODES) planAndCheck(snapshot, { mode }, `shape ${index} seed ${seed}`);
    }
  });
});

test('--nodes K uses the K nodes holding most pieces, drains the rest, and keeps invariants', () => {
  const shape = { nodes: 10, pieces: 150, replicasMax: 2, inactive: 1 };
  for (let seed = 1; seed <= 5; seed++) {
    const snapshot = randomSnapshot(seed, shape);
    for (const mode of DISTRIBUTE_MODES) {
      for (const nodes of [3, 5, 9]) planAndCheck(snapshot, { mode, nodes }, `seed ${seed}`);
    }
  }
  // Copies held: a 3, b 2, c 2 (c is primary for fewer), d 1, e 0: K = 2 keeps a and b.
  const snapshot: CatalogSnapshot = {
    model: 'm',
    nodes: ['a', 'b', 'c', 'd', 'e'].map((name) => ({ name, active: true })),
    pieces: [
      { index: 0, sizeBytes: 1, holders: ['a', 'b'], version: 1 },
      { index: 1, sizeBytes: 1, holders: ['a', 'c'], version: 1 },
      { index: 2, sizeBytes: 1, holders: ['b', 'a'], version: 1 },
      { index: 3, sizeBytes: 1, holders: ['d', 'c'], version: 1 },
    ],
  };
  const plan = planDistribute(snapshot, { mode: 'replica', nodes: 2 });
  assert.deepEqual(plan.targetNodes, ['a', 'b']);
  assert.deepEqual(plan.drainedNodes, ['c', 'd']);
  checkPlan(snapshot, plan, { mode: 'replica', nodes: 2 });
});

test('inactive nodes are drained of every copy, primaries and replicas alike', () => {
  const snapshot = randomSnapshot(5, { nodes: 6, pieces: 120, replicasMax: 2, inactive: 2 });
  for (const mode of DISTRIBUTE_MODES) {
    const plan = planDistribute(snapshot, { mode });
    assert.deepEqual(plan.drainedNodes, [nodeName(0), nodeName(1)]);
    for (const piece of plan.afterPieces) {
      assert.ok(!piece.holders.includes(nodeName(0)) && !piece.holders.includes(nodeName(1)));
    }
    assert.ok(plan.moves.some((move) => move.from === nodeName(0) && move.kind === 'replica'));
  }
});

test('already balanced input gives zero moves in every mode', () => {
  const nodes = Array.from({ length: 5 }, (_, index) => ({ name: nodeName(index), active: true }));
  // 50 pieces on 5 nodes: with 2 replicas on the next nodes, copies are balanced too.
  const snapshot = placeSnapshot('m', nodes, new Array<number>(50).fill(64), {
    policy: 'round-robin',
    replicas: 2,
  });
  for (const mode of DISTRIBUTE_MODES) {
    const plan = planDistribute(shuffledSnapshot(snapshot, 3), { mode });
    assert.equal(plan.moves.length, 0, mode);
    assert.ok(renderPlanText(plan).includes('plan: no moves'));
  }
  // A round-robin layout under some other rotation: the planner finds that rotation, not name order.
  const rotated: CatalogSnapshot = {
    model: 'm',
    nodes,
    pieces: [...snapshot.pieces].map((piece) => ({
      ...piece,
      holders: [nodeName((piece.index * 3 + 1) % 5)],
    })),
  };
  const plan = planDistribute(rotated, { mode: 'round-robin' });
  assert.equal(plan.moves.length, 0);
  assert.equal(plan.rotation!.moves, 0);
  assert.ok(plan.rotation!.nameOrderMoves > 0);
});

test('replica mode converges in one pass: planning again after it moves nothing', () => {
  SHAPES.forEach((shape, index) => {
    for (let seed = 1; seed <= 4; seed++) {
      const snapshot = randomSnapshot(seed * 31 + index, shape);
      for (const mode of DISTRIBUTE_MODES) {
        const plan = planDistribute(snapshot, { mode });
        const again = planDistribute({ ...snapshot, pieces: plan.afterPieces }, { mode });
        assert.equal(again.moves.length, 0, `shape ${index} seed ${seed} ${mode}`);
      }
    }
  });
});

test('small random layouts of every kind: invariants hold and a second pass moves nothing', () => {
  const random = new Random(99);
  for (let trial = 0; trial < 250; trial++) {
    const nodes = 2 + random.below(7);
    const inactive = random.below(Math.max(1, nodes - 2));
    const shape: RandomSnapshotOptions = {
      nodes,
      pieces: 1 + random.below(40),
      replicasMax: random.below(nodes - inactive),
      inactive,
      ...(random.below(2) === 0 ? { hot: 1 + random.below(nodes) } : {}),
    };
    const snapshot = randomSnapshot(trial, shape);
    const copiesMax = Math.max(...[...snapshot.pieces].map((piece) => piece.holders.length));
    for (const mode of DISTRIBUTE_MODES) {
      const spare = nodes - inactive - copiesMax;
      const options: DistributeOptions =
        random.below(2) === 0 ? { mode } : { mode, nodes: copiesMax + random.below(Math.max(1, spare + 1)) };
      if (copiesMax > nodes - inactive) continue;
      const label = `trial ${trial} ${JSON.stringify(shape)} ${JSON.stringify(options)}`;
      planAndCheck(snapshot, options, label);
      const plan = planDistribute(snapshot, options);
      assert.equal(planDistribute({ ...snapshot, pieces: plan.afterPieces }, options).moves.length, 0, label);
    }
  }
});

test('plans are identical byte for byte whatever order the input arrives in', () => {
  for (let seed = 1; seed <= 4; seed++) {
    const snapshot = randomSnapshot(seed, { nodes: 9, pieces: 300, replicasMax: 2, inactive: 1, hot: 6 });
    for (const mode of DISTRIBUTE_MODES) {
      const options: DistributeOptions = { mode, nodes: 6 };
      const json = renderPlanJson(planDistribute(snapshot, options), { includeLayout: true });
      const text = renderPlanText(planDistribute(snapshot, options));
      for (let shuffle = 1; shuffle <= 3; shuffle++) {
        const other = shuffledSnapshot(snapshot, seed * 10 + shuffle);
        assert.equal(renderPlanJson(planDistribute(other, options), { includeLayout: true }), json);
        assert.equal(renderPlanText(planDistribute(other, options)), text);
      }
    }
  }
});

function permutations<T>(items: readonly T[]): T[][] {
  if (items.length <= 1) return [[...items]];
  return items.flatMap((item, at) =>
    permutations([...items.slice(0, at), ...items.slice(at + 1)]).map((rest) => [item, ...rest]),
  );
}

test('round-robin moves no more pieces than the best of all K! rotations (brute force, K <= 6)', () => {
  let trials = 0;
  for (let nodeCount = 2; nodeCount <= 7; nodeCount++) {
    for (let seed = 1; seed <= 8; seed++) {
      const snapshot = randomSnapshot(nodeCount * 1000 + seed, {
        nodes: nodeCount,
        pieces: 10 + ((seed * 37) % 90),
        replicasMax: seed % 3 === 0 ? 0 : 1,
        hot: seed % 2 === 0 ? 2 : nodeCount,
      });
      const nodes = nodeCount === 7 ? 6 : undefined;
      const plan = planDistribute(snapshot, {
        mode: 'round-robin',
        ...(nodes === undefined ? {} : { nodes }),
      });
      const pieces = [...snapshot.pieces];
      const k = plan.targetNodes.length;
      let best = Number.POSITIVE_INFINITY;
      let bestPromotes = Number.POSITIVE_INFINITY;
      for (const rotation of permutations(plan.targetNodes)) {
        const target = (index: number): string => rotation[index % k]!;
        const moves = pieces.filter((piece) => !piece.holders.includes(target(piece.index))).length;
        const promotes = pieces.filter((piece) => piece.holders.indexOf(target(piece.index)) > 0).length;
        if (moves < best || (moves === best && promotes < bestPromotes))
          [best, bestPromotes] = [moves, promotes];
      }
      assert.equal(plan.rotation!.moves, best, `K ${k} seed ${seed}`);
      assert.equal(plan.rotation!.promotes, bestPromotes, `K ${k} seed ${seed}: promotions`);
      assert.equal(plan.counts.promote, bestPromotes);
      assert.equal(plan.counts.primary, best, `K ${k} seed ${seed}: primary byte moves`);
      assert.ok(best <= plan.rotation!.nameOrderMoves);
      trials++;
    }
  }
  assert.equal(trials, 48);
});

test('moves spread over sources and targets from the start, and carry the versions the catalog will have', () => {
  const snapshot = randomSnapshot(11, { nodes: 20, pieces: 800, replicasMax: 1, hot: 4 });
  const plan = planDistribute(snapshot, { mode: 'round-robin' });
  const early = plan.moves.slice(0, 20);
  assert.ok(new Set(early.map((move) => move.from)).size >= 4, 'all four loaded nodes send early');
  assert.ok(new Set(early.map((move) => move.to)).size >= 10, 'early moves land on many nodes');
  // A piece moved twice expects its version, then one more.
  const seen = new Map<number, number>();
  const versions = new Map([...snapshot.pieces].map((piece) => [piece.index, piece.version]));
  for (const move of plan.moves) {
    const count = seen.get(move.piece) ?? 0;
    assert.equal(move.expectVersion, versions.get(move.piece)! + count);
    seen.set(move.piece, count + 1);
  }
  // Applying a plan twice is refused: every entry moved on.
  const after = { ...snapshot, pieces: applyMoves(snapshot, plan.moves) };
  assert.throws(
    () => applyMoves(after, plan.moves),
    (error) => isWeightcastError(error, 'SEED_PLAN_INVALID'),
  );
});

test('promotion moves no bytes when the target already holds a replica', () => {
  const snapshot: CatalogSnapshot = {
    model: 'm',
    nodes: ['a', 'b'].map((name) => ({ name, active: true })),
    pieces: [
      { index: 0, sizeBytes: 5, holders: ['a', 'b'], version: 3 },
      { index: 1, sizeBytes: 5, holders: ['a', 'b'], version: 3 },
    ],
  };
  for (const mode of DISTRIBUTE_MODES) {
    const plan = planDistribute(snapshot, { mode });
    assert.equal(plan.moves.length, 1, mode);
    assert.equal(plan.moves[0]!.kind, 'promote');
    assert.equal(plan.counts.bytes, 0);
    assert.deepEqual(
      plan.after.nodes.map((node) => node.pieces),
      [1, 1],
    );
  }
});

test('when no replica fits, a primary moves and a promotion keeps the primary counts even', () => {
  // Copies: o 4, u 2, w 3, x 3 (quota 3 each); primaries o 2, u 2, w 1, x 1 (already floor/ceil).
  // Both replicas on o are of pieces u already holds, and u is at the primary ceiling: piece 0's
  // primary moves o -> u while piece 2 (primary u, replica o) is promoted on o.
  const snapshot: CatalogSnapshot = {
    model: 'm',
    nodes: ['o', 'u', 'w', 'x'].map((name) => ({ name, active: true })),
    pieces: [
      { index: 0, sizeBytes: 1, holders: ['o', 'w'], version: 1 },
      { index: 1, sizeBytes: 1, holders: ['o', 'x'], version: 1 },
      { index: 2, sizeBytes: 1, holders: ['u', 'o'], version: 1 },
      { index: 3, sizeBytes: 1, holders: ['u', 'o'], version: 1 },
      { index: 4, sizeBytes: 1, holders: ['w', 'x'], version: 1 },
      { index: 5, sizeBytes: 1, holders: ['x', 'w'], version: 1 },
    ],
  };
  const plan = planDistribute(snapshot, { mode: 'replica' });
  checkPlan(snapshot, plan, { mode: 'replica' });
  assert.deepEqual(
    plan.moves.map((move) => [move.piece, move.from, move.to, move.kind]),
    [
      [0, 'o', 'u', 'primary'],
      [2, 'u', 'o', 'promote'],
    ],
  );
  assert.deepEqual(
    plan.after.nodes.map((node) => [node.pieces, node.copies]),
    [
      [2, 3],
      [2, 3],
      [1, 3],
      [1, 3],
    ],
  );
});

test('bad snapshots and impossible requests fail with typed errors', () => {
  const nodes = ['a', 'b', 'c'].map((name) => ({ name, active: true }));
  const piece = { index: 0, sizeBytes: 1, holders: ['a'], version: 1 };
  const cases: Array<[CatalogSnapshot, DistributeOptions, string]> = [
    [
      { model: 'm', nodes, pieces: [{ ...piece, holders: ['a', 'a'] }] },
      { mode: 'primary' },
      'SEED_PLAN_INVALID',
    ],
    [{ model: 'm', nodes, pieces: [{ ...piece, holders: ['z'] }] }, { mode: 'primary' }, 'SEED_PLAN_INVALID'],
    [{ model: 'm', nodes, pieces: [{ ...piece, holders: [] }] }, { mode: 'primary' }, 'SEED_PLAN_INVALID'],
    [{ model: 'm', nodes, pieces: [{ ...piece, index: 1 }] }, { mode: 'primary' }, 'SEED_PLAN_INVALID'],
    [{ model: 'm', nodes: [...nodes, nodes[0]!], pieces: [piece] }, { mode: 'primary' }, 'SEED_PLAN_INVALID'],
    [{ model: 'm', nodes, pieces: [piece] }, { mode: 'sideways' as 'primary' }, 'SEED_PLAN_INVALID'],
    [{ model: 'm', nodes, pieces: [piece] }, { mode: 'primary', nodes: 0 }, 'SEED_PLAN_INVALID'],
    [{ model: 'm', nodes, pieces: [piece] }, { mode: 'primary', nodes: 4 }, 'SEED_PLACEMENT_IMPOSSIBLE'],
    [
      { model: 'm', nodes, pieces: [{ ...piece, holders: ['a', 'b', 'c'] }] },
      { mode: 'round-robin', nodes: 2 },
      'SEED_PLACEMENT_IMPOSSIBLE',
    ],
  ];
  for (const [snapshot, options, code] of cases) {
    assert.throws(
      () => planDistribute(snapshot, options),
      (error) => isWeightcastError(error) && error.code === code,
      JSON.stringify(options),
    );
  }
});
