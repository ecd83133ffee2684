import { test } from 'node:test';
import assert from 'node:assert/strict';
import { planDistribute, planToJson, renderPlanJson, renderPlanText } from '../../../src/seed/plan/index.js';
import { randomSnapshot } from './helpers.js';

test('the dry-run text shows the layout before and after, the rotation and every move of a small plan', () => {
  const snapshot = randomSnapshot(2, { nodes: 4, pieces: 12, replicasMax: 1, inactive: 1 });
  const plan = planDistribute(snapshot, { mode: 'round-robin' });
  const text = renderPlanText(plan);
  assert.match(text, /^model sha256:test-2: 12 pieces/);
  assert.match(text, /mode round-robin over 3 nodes: node-001, node-002, node-003/);
  assert.match(text, /drained: node-000/);
  assert.match(text, /read efficiency\s+0\.79\s+0\.99/);
  assert.match(text, /node-000 \(inactive\)/);
  assert.match(text, /rotation \(piece i -> node of residue i mod 3\)/);
  for (const move of plan.moves) {
    assert.ok(text.includes(`${move.from}  ->  ${move.to}`), `move of piece ${move.piece} listed`);
  }
  assert.ok(!text.includes('more moves'));
});

test('large plans are summarised: the first moves, the busiest nodes, and counts of the rest', () => {
  const snapshot = randomSnapshot(3, { nodes: 60, pieces: 2240, replicasMax: 1, hot: 5 });
  const plan = planDistribute(snapshot, { mode: 'replica' });
  const text = renderPlanText(plan, { movesShown: 10, nodesShown: 12 });
  assert.match(text, new RegExp(`\\.\\.\\. ${plan.moves.length - 10} more moves`));
  assert.match(text, /\.\.\. 48 more nodes; after: pieces 37\.\.38, copies \d+\.\.\d+/);
  assert.ok(text.split('\n').length < 60, 'stays a screenful');
});

test('the JSON form is the plan, parseable, with every move, and the layout on request', () => {
  const snapshot = randomSnapshot(4, { nodes: 7, pieces: 100, replicasMax: 2, inactive: 1 });
  const plan = planDistribute(snapshot, { mode: 'primary', nodes: 5 });
  const parsed = JSON.parse(renderPlanJson(plan)) as Record<string, unknown>;
  assert.deepEqual(parsed, JSON.parse(JSON.stringify(planToJson(plan))));
  assert.equal((parsed.moves as unknown[]).length, plan.moves.length);
  assert.equal(parsed.afterPieces, undefined);
  assert.deepEqual(Object.keys(parsed), [
    'model',
    'mode',
    'targetNodes',
    'drainedNodes',
    'counts',
    'before',
    'after',
    'moves',
  ]);
  const full = JSON.parse(renderPlanJson(plan, { includeLayout: true })) as { afterPieces: unknown[] };
  assert.equal(full.afterPieces.length, 100);
});
