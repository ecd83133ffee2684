import { test } from 'node:test';
import assert from 'node:assert/strict';
import { reportLayout, type CatalogSnapshot } from '../../../src/seed/plan/index.js';

test('the layout report counts pieces and copies per node, read efficiency and window spread', () => {
  // 6 pieces of 10 bytes: a a a b b c (primaries); replicas on c, a, a, c, a, b.
  const primaries = ['a', 'a', 'a', 'b', 'b', 'c'];
  const replicas = ['c', 'b', 'c', 'c', 'a', 'b'];
  const snapshot: CatalogSnapshot = {
    model: 'm',
    nodes: [
      { name: 'a', active: true },
      { name: 'b', active: true },
      { name: 'c', active: true },
      { name: 'd', active: true },
    ],
    pieces: primaries.map((primary, index) => ({
      index,
      sizeBytes: 10,
      holders: [primary, replicas[index]!],
      version: 1,
    })),
  };
  const report = reportLayout(snapshot, { windows: [2, 3, 10] });
  assert.equal(report.pieces, 6);
  assert.equal(report.copies, 12);
  assert.equal(report.totalBytes, 60);
  assert.equal(report.measuredNodes, 4);
  assert.deepEqual(
    report.nodes.map((node) => [node.name, node.pieces, node.copies]),
    [
      ['a', 3, 4],
      ['b', 2, 4],
      ['c', 1, 4],
      ['d', 0, 0],
    ],
  );
  assert.equal(report.busiestNode, 'a');
  assert.equal(report.busiestShare, 0.5);
  // Ideal 60 / 4 = 15 bytes per node; the busiest serves 30.
  assert.equal(report.readEfficiency, 0.5);
  assert.equal(report.copiesMin, 0);
  assert.equal(report.copiesMax, 4);
  // Windows of 2 over a a a b b c: 1 1 2 1 2; of 3: 1 2 2 2.
  assert.deepEqual(report.windows[0], { window: 2, distinctNodesMin: 1, distinctNodesMean: 7 / 5 });
  assert.deepEqual(report.windows[1], { window: 3, distinctNodesMin: 1, distinctNodesMean: 7 / 4 });
  assert.deepEqual(report.windows[2], { window: 10, distinctNodesMin: 3, distinctNodesMean: 3 });
  // Measured against the three nodes that hold data, the ideal is 20 bytes.
  assert.equal(reportLayout(snapshot, { nodes: ['a', 'b', 'c'] }).readEfficiency, 20 / 30);
});

test('an empty model reports zeros and full efficiency', () => {
  const report = reportLayout({ model: 'm', nodes: [{ name: 'a', active: true }], pieces: [] });
  assert.equal(report.pieces, 0);
  assert.equal(report.readEfficiency, 1);
  assert.equal(report.windows[0]!.distinctNodesMin, 0);
});
